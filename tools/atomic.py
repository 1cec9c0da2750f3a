"""Writes that an interruption (an exception or a SIGKILL) cannot leave half done.

A file is written to a temporary file in its own folder and renamed over the target (``os.replace``). A folder is
swapped whole: the old one is renamed to a backup beside it, the new one into place, then the backup is deleted.
:func:`recover` finishes or undoes a swap that was cut between those steps; the tools call it before anything else.
"""
import pathlib
import shutil
from typing import Optional

from timm_odevit._checks import write_atomic  # noqa: F401 (the tools' one way to write a file)

PACKAGED = ('model.safetensors', 'config.json')  # the package's copy of a release: its weights and their config
PACKAGE_MARK = '.package'  # in a swapped-in folder until its package copy is written: that copy's folder


def backup_of(folder: pathlib.Path) -> pathlib.Path:
    return folder.with_name(f'.{folder.name}.old')


def swap_folder(new: pathlib.Path, folder: pathlib.Path, package: Optional[pathlib.Path] = None) -> None:
    """Put the complete folder ``new`` in place of ``folder``, and its :data:`PACKAGED` files into ``package``
    (named in ``new``'s :data:`PACKAGE_MARK` until copied, so that whichever command recovers next finishes the copy)."""
    if package is not None:
        write_atomic(new / PACKAGE_MARK, str(pathlib.Path(package).resolve()))
    folder.rename(backup_of(folder))
    new.rename(folder)
    recover(folder)


def recover(folder, package: Optional[pathlib.Path] = None) -> None:
    """Restore ``folder`` from its backup when a swap stopped before the new folder was in place; else finish the
    swap (the package copy its :data:`PACKAGE_MARK` names) and delete what was left behind (``package``: a package
    folder whose temporary files to delete too)."""
    folder = pathlib.Path(folder)
    backup, mark = backup_of(folder), folder / PACKAGE_MARK
    if backup.is_dir() and not folder.exists():
        backup.rename(folder)
    if mark.is_file():  # the new folder is in place; its package copy may not be
        target = pathlib.Path(mark.read_text())
        for name in PACKAGED:
            write_atomic(target / name, (folder / name).read_bytes())
        mark.unlink()
    if backup.is_dir():
        shutil.rmtree(backup)
    for left in folder.parent.glob(f'.{folder.name}.cycle-*'):  # staging folders of killed runs
        shutil.rmtree(left, ignore_errors=True)
    for tmp in [*folder.glob('.*.tmp'), *(package.glob('.*.tmp') if package else ())]:
        tmp.unlink(missing_ok=True)
