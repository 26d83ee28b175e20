"""`fleet demo --keep DIR` works only in a folder no one else controls (issue 32, finding 3).

Under `sudo fleet demo --lab --keep DIR`, pyinfra executes `DIR/group_data/*.py`: a folder
another user can write to (or planted with a marker and code) ran that user's code as root,
and the demo's writes followed symlinks planted there. Now the folder and those above it must
belong to this user or root and be writable by no one else, a reused folder may hold only what
a demo leaves, and the demo's files are created with O_EXCL | O_NOFOLLOW."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet.errors import BadInput
from fleet.jobs.demo_folder import MARKER, MATRIX_FILE, REPORT_DIR, clear_for_run, working_folder
from fleet.local_files import create_file, recreate_file, untrusted_folder


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """What the attacker of the review left: a marker, and code pyinfra would run."""
    keep = tmp_path / "fleet-demo"
    (keep / "group_data").mkdir(parents=True)
    (keep / MARKER).write_text("")
    pwned = tmp_path / "PWNED"
    (keep / "group_data" / "all.py").write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    return keep, pwned


def test_a_folder_with_planted_group_data_is_refused(tmp_path: Path) -> None:
    keep, _pwned = planted(tmp_path)
    with pytest.raises(BadInput) as err:
        working_folder(keep)
    assert err.value.problems[0].field == "--keep"
    assert "group_data" in err.value.problems[0].message


def as_another_user(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make `folder` someone else's: chown it as root, else pretend to be another user."""
    if os.geteuid() == 0:
        os.chown(folder, 4242, 4242)
    else:
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 4242)
    monkeypatch.delenv("SUDO_UID", raising=False)


def test_a_folder_of_another_user_is_refused_even_empty(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    keep = tmp_path / "theirs"
    keep.mkdir()
    as_another_user(monkeypatch, keep)
    with pytest.raises(BadInput, match="belongs to uid"):
        working_folder(keep)
    assert not (keep / MARKER).exists()


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_folder_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    keep = tmp_path / "shared"
    keep.mkdir()
    keep.chmod(mode)
    with pytest.raises(BadInput, match="can be written by others"):
        working_folder(keep)


def test_a_folder_under_a_world_writable_non_sticky_one_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "drop"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename what is in it
    with pytest.raises(BadInput, match="drop can be written by others"):
        working_folder(shared / "demo")


def test_a_sticky_world_writable_parent_is_fine(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    tmpdir.chmod(0o1777)  # as /tmp: no one can rename another's entry
    assert untrusted_folder(tmpdir) is not None  # as the working folder itself: refused
    folder = working_folder(tmpdir / "mine")
    assert (folder / MARKER).is_file()


def test_a_symlinked_marker_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    keep = tmp_path / "demo"
    keep.mkdir()
    victim = tmp_path / "victim.conf"
    victim.write_text("important\n")
    (keep / MARKER).symlink_to(victim)
    with pytest.raises(BadInput, match=MARKER):
        working_folder(keep)
    assert victim.read_text() == "important\n"


def test_a_symlinked_reports_folder_is_refused(tmp_path: Path) -> None:
    keep = working_folder(tmp_path / "demo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (keep / REPORT_DIR).symlink_to(elsewhere)
    with pytest.raises(BadInput, match=REPORT_DIR):
        working_folder(keep)


def test_a_folder_an_earlier_demo_left_is_reused(tmp_path: Path) -> None:
    keep = working_folder(tmp_path / "demo")
    clear_for_run(keep)
    create_file(keep / MATRIX_FILE, "m")
    (keep / REPORT_DIR / "latest.md").write_text("r")
    assert working_folder(keep) == keep.resolve()
    clear_for_run(keep)
    assert not (keep / MATRIX_FILE).exists()  # removed, made anew by the run


def test_a_symlinked_matrix_is_removed_not_followed(tmp_path: Path) -> None:
    # one the folder's owner made after the check: the run removes it, the target stays
    keep = working_folder(tmp_path / "demo")
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (keep / MATRIX_FILE).symlink_to(victim)
    clear_for_run(keep)
    create_file(keep / MATRIX_FILE, "matrix\n")
    assert victim.read_text() == "keep me\n" and (keep / MATRIX_FILE).read_text() == "matrix\n"


def test_files_are_created_never_opened_as_found(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_file(link, "x")
    recreate_file(link, "new\n")  # the link goes, its target stays
    assert victim.read_text() == "keep me\n" and link.read_text() == "new\n"
    assert not link.is_symlink()


def test_sudo_users_own_folder_is_accepted_under_sudo(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Root, run by `sudo` from the folder's owner (who could run anything as root anyway)."""
    keep = tmp_path / "alices"
    keep.mkdir()
    if os.geteuid() == 0:
        os.chown(keep, 4242, 4242)
        monkeypatch.setenv("SUDO_UID", "4242")
    else:  # the folder is this user's: play root, run by sudo from this user
        monkeypatch.setenv("SUDO_UID", str(os.geteuid()))
        monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert working_folder(keep) == keep.resolve()
    monkeypatch.setenv("SUDO_UID", "4343")  # sudo run by somebody else: not theirs
    with pytest.raises(BadInput, match="belongs to uid"):
        working_folder(keep)


def test_help_and_examples_suggest_no_shared_tmp_folder(fleet_cli) -> None:
    from fleet.cli import examples

    r = fleet_cli("demo", "--help")
    assert "/tmp/" not in r.stdout
    assert "/tmp/fleet-demo" not in Path(examples.__file__).read_text()
