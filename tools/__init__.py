"""Long-running verification scripts and the helpers their fast test versions share."""
