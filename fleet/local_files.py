"""Files the controller writes into a folder a user named (`bundle collect -o`, `demo --keep`).

Such a folder may hold what someone else put there: an old capture that would be read as a new
one, a symlink that turns a write into an overwrite of another file, or (under sudo) code that
runs as root. So a file is only ever created, never opened as found: `O_CREAT | O_EXCL |
O_NOFOLLOW` fails on anything already at the name, a symlink included. The folder checks here
say which folders may be written into at all.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fleet.errors import BadInput

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def create_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` into a file this call creates; FileExistsError when anything (a file, a
    symlink, a folder) is already at `path`: nothing existing is opened or followed."""
    fd = os.open(path, _NEW, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as f:
            f.write(text)
    finally:
        os.close(fd)


def recreate_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace what is at `path` (a file, or a symlink: the link goes, its target is untouched)
    with a new file holding `text`. A folder at `path` is an error (IsADirectoryError)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise IsADirectoryError(f"{path} is a folder")
        os.unlink(path)
    except FileNotFoundError:
        pass
    create_file(path, text, mode)


def fresh_folder(path: Path, *, field: str, create: bool = True) -> Path:
    """`path` as an empty folder to write new files into: made when missing (its parents too;
    with `create=False` only checked), accepted when it is an empty folder; a symlink, a file
    or a folder holding anything is bad input (old files there would be mixed with the new)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            return fresh_folder(path, field=field)  # made meanwhile: check what it is
        return path
    if stat.S_ISLNK(st.st_mode):
        raise BadInput.single("is a symlink: give the folder itself (a new or empty one)",
                              file=str(path), field=field)
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput.single("exists and is not a folder", file=str(path), field=field)
    if any(os.scandir(path)):
        raise BadInput.single("the folder is not empty: give a new or empty folder (what is "
                              "there would be read with what is written now)", file=str(path),
                              field=field)
    return path


def untrusted_folder(path: Path, uid: int | None = None) -> str | None:
    """Why `path` (a folder that exists) is not safe for this user to work in, or None.

    Safe: the folder and every folder above it belong to this user or root, and no one else can
    write to it; a folder above may be writable by others only with the sticky bit (/tmp),
    where no one can rename or remove another user's entry. As OpenSSH's StrictModes asks of
    ~/.ssh. Symlinks are resolved first, so the folders checked are the ones written to."""
    me = os.geteuid() if uid is None else uid
    real = path.resolve()
    for i, folder in enumerate([real, *real.parents]):
        try:
            st = os.stat(folder)
        except OSError as e:
            return f"cannot read {folder}: {e.strerror}"
        if st.st_uid not in (me, 0):
            return f"{folder} belongs to uid {st.st_uid}, not to you (uid {me}) or root"
        others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if others and (i == 0 or not st.st_mode & stat.S_ISVTX):
            return f"{folder} can be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None
