"""The demo's working folder: which folder `--keep DIR` may name, and starting a run there.

`fleet demo --lab` runs as root and hands the folder to pyinfra, which executes
`DIR/group_data/*.py` beside the inventory it is given: a folder someone else can write to is
code run as root. So a folder is used only when it and every folder above it belong to this
user (or root, or under sudo the user who ran sudo) and no one else can write to it
(`fleet.local_files.untrusted_folder`), and a folder that already holds something is reused
only when all of it is what a demo leaves (its marker among it): no other name at the top, no
folder but the reports, no symlink, nothing of another user. The demo's files are then
removed and created anew (`O_EXCL | O_NOFOLLOW`), never opened as found.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from fleet.errors import BadInput
from fleet.jobs.demo_cast import DB_FILE, MATRIX_FILE, REPORT_DIR, SIM_FILE
from fleet.local_files import recreate_file, untrusted_folder

__all__ = ["DB_FILE", "FILES", "INVENTORY_FILE", "LAB_RELEASES_FILE", "MARKER", "MATRIX_FILE",
           "REPORT_DIR", "SIM_FILE", "clear_for_run", "working_folder"]

INVENTORY_FILE = "inventory.py"
"""`--lab`: the pyinfra inventory of the lab's hosts, written into the folder."""
LAB_RELEASES_FILE = "lab-releases.yaml"
MARKER = ".fleet-demo"
"""Written into the working folder: `--keep` reuses only a folder that has it (or is empty)."""
FILES = (MARKER, MATRIX_FILE, DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", f"{DB_FILE}-journal",
         SIM_FILE, INVENTORY_FILE, LAB_RELEASES_FILE)
"""Every file a demo leaves at the top of its folder (besides REPORT_DIR): all that a reused
folder may hold."""

MARKER_TEXT = "made by `fleet demo`; `fleet demo --keep` may reuse it\n"


def trusted_uids() -> set[int]:
    """Who may own the folder: this user, root, and under sudo the user who ran sudo (who
    could run anything as root anyway)."""
    me = os.geteuid()
    uids = {me, 0}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if me == 0 and sudo_uid.isdigit():
        uids.add(int(sudo_uid))
    return uids


def working_folder(keep: Path | None) -> Path:
    """The folder the demo works in: a new private temporary one, or `keep` (made when missing)
    once it passes the checks above; its marker written. BadInput (field `--keep`) otherwise."""
    folder = Path(tempfile.mkdtemp(prefix="fleet-demo-")) if keep is None else _kept(keep)
    recreate_file(folder / MARKER, MARKER_TEXT)
    return folder


def _kept(keep: Path) -> Path:
    def bad(message: str) -> BadInput:
        return BadInput.single(message, file=str(keep), field="--keep")

    if keep.exists() and not keep.is_dir():
        raise bad("not a folder")
    if not keep.exists():
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.mkdir(mode=0o755, exist_ok=True)
    folder = keep.resolve()  # from here on the real path: a symlink swapped later changes nothing
    uids = trusted_uids()
    why = _why_untrusted(folder, uids)
    if why:
        raise bad(f"not safe to work in: {why}; give a folder of your own that only you can "
                  "write to (for example under your home folder)")
    held = sorted(os.listdir(folder))
    if held and MARKER not in held:
        raise bad("the folder is not empty and was not made by `fleet demo`; give a new or "
                  "empty folder")
    odd = [name for name in held if not _left_by_a_demo(folder, name)]
    if odd:
        raise bad(f"the folder holds {', '.join(odd[:5])}, which `fleet demo` does not make "
                  "(a symlink, another folder, or a file of its own): give a new or empty "
                  "folder")
    return folder


def _why_untrusted(folder: Path, uids: set[int]) -> str | None:
    reasons = [untrusted_folder(folder, uid) for uid in sorted(uids)]
    if any(r is None for r in reasons):
        return None  # safe for one of the trusted owners
    return reasons[0]


def _left_by_a_demo(folder: Path, name: str) -> bool:
    """Whether `folder/name` is something a demo leaves: one of its files (a plain file), or
    the reports folder holding plain files only; each belonging to a trusted user."""
    path = folder / name
    st = os.lstat(path)
    uids = trusted_uids()
    if st.st_uid not in uids:
        return False
    if name == REPORT_DIR:
        if not stat.S_ISDIR(st.st_mode):
            return False
        return all(e.is_file(follow_symlinks=False)
                   and e.stat(follow_symlinks=False).st_uid in uids for e in os.scandir(path))
    is_file = stat.S_ISREG(st.st_mode)
    # a killed run may leave the simulated fleet's temporary file (save_fleet)
    return is_file and (name in FILES or (name.startswith(f"{SIM_FILE}.")
                                          and name.endswith(".tmp")))


def clear_for_run(folder: Path) -> None:
    """Start a run in `folder` afresh: the files an earlier run left removed (a symlink removed,
    never followed), the reports folder made."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if name == MARKER:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / name)
    reports = folder / REPORT_DIR
    try:
        os.mkdir(reports, 0o755)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(reports).st_mode):  # a symlink or a file: not ours
            raise BadInput.single("not a folder (the demo's reports go there)",
                                  file=str(reports)) from None
