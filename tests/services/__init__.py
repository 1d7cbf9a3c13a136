"""Real servers the tests start for themselves: PostgreSQL (initdb in a temp dir) and
SeaweedFS's S3 gateway, each on loopback, each stopped at the end."""
