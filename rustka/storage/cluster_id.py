"""The cluster id Kafka clients see: created once per data dir, then never changed.

Kafka clients cache the cluster id and some warn or refuse when it changes under
them, so it lives in the data dir (file ``cluster-id``), written atomically the
first time the broker opens that directory. The format is Kafka's: a random
UUID as 22 characters of URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

FILE_NAME = "cluster-id"
_LENGTH = 22


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create(data_dir: Path) -> str:
    """The data dir's cluster id, creating it on first use. Blocking: run on the pool."""
    path = data_dir / FILE_NAME
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as e:
        raise OSError(f"cannot read {path}: {e}") from e
    if _valid(text):
        return text
    cluster_id = new_cluster_id()
    tmp = path.with_name(FILE_NAME + ".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(cluster_id + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return cluster_id


def _valid(text: str) -> bool:
    if len(text) != _LENGTH:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except ValueError:
        return False
