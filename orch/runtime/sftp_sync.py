"""Uploads over SFTP, like ``rsync -a`` without ``--delete``.

Directories are
created as needed, file and directory modes and file mtimes are copied (an existing
target directory keeps its own mode: it may be the home), symlinks stay symlinks, a file whose
size and mtime already match is skipped (so re-syncing a workdir costs one directory
listing per directory), and remote files missing locally are left alone (SkyPilot's
rsync does not delete either). A file's mtime is set after its content, so an interrupted
copy never looks up to date.

"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

import paramiko


def remote_path(sftp: paramiko.SFTPClient, remote: str) -> str:
    if remote.startswith("/"):
        return posixpath.normpath(remote)
    home = sftp.normalize(".")  # an sftp session starts in the home directory
    relative = "" if remote == "~" else remote.removeprefix("~/")
    return posixpath.normpath(posixpath.join(home, relative))


def _attributes(
    sftp: paramiko.SFTPClient, path: str, *, follow: bool = False
) -> paramiko.SFTPAttributes | None:
    try:
        return sftp.stat(path) if follow else sftp.lstat(path)
    except FileNotFoundError:
        return None


def _makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """``mkdir -p``."""
    if path in ("", "/") or _attributes(sftp, path, follow=True) is not None:
        return
    _makedirs(sftp, posixpath.dirname(path))
    sftp.mkdir(path)


def _kind(attributes: paramiko.SFTPAttributes | None) -> int:
    """The file type bits (stat.S_IFREG, S_IFDIR, S_IFLNK...), 0 when missing."""
    return stat.S_IFMT(attributes.st_mode or 0) if attributes is not None else 0


def _permissions(attributes: paramiko.SFTPAttributes) -> int:
    return stat.S_IMODE(attributes.st_mode or 0)


_Remote = paramiko.SFTPAttributes | None  # what stands at a remote path (None: nothing)


class SftpSync:
    """Copies a local file or tree to a remote path, skipping what is up to date."""

    def __init__(self, sftp: paramiko.SFTPClient) -> None:
        self.sftp = sftp
        self.copied = 0
        self.unchanged = 0

    def root(self, source: Path, target: str) -> str:
        """Like ``cp`` for a file (into ``target`` if it is a directory) and like
        ``rsync -a source/ target`` for a directory; returns where it went. An existing
        target directory keeps its own mode (it may be the home directory)."""
        existing = _attributes(self.sftp, target, follow=True)
        if source.is_dir():
            if existing is None:
                _makedirs(self.sftp, posixpath.dirname(target))
                self._mkdir(target, source.stat())
            elif _kind(existing) != stat.S_IFDIR:
                raise NotADirectoryError(f"remote {target} exists and is not a directory")
            self._children(source, target, fresh=existing is None)
            return target
        if _kind(existing) == stat.S_IFDIR:
            target = posixpath.join(target, source.name)
            existing = _attributes(self.sftp, target)
        else:
            _makedirs(self.sftp, posixpath.dirname(target))
            existing = _attributes(self.sftp, target)
        self._file(source, target, existing, source.stat())
        return target

    def _children(self, source: Path, target: str, *, fresh: bool) -> None:
        listing = {} if fresh else {a.filename: a for a in self.sftp.listdir_attr(target)}
        for child in sorted(source.iterdir()):
            self._entry(child, posixpath.join(target, child.name), listing.get(child.name))

    def _entry(self, source: Path, target: str, existing: _Remote) -> None:
        info = source.lstat()
        kind = stat.S_IFMT(info.st_mode)
        if kind == stat.S_IFLNK:
            self._symlink(source, target, existing)
        elif kind == stat.S_IFREG:
            self._file(source, target, existing, info)
        elif kind == stat.S_IFDIR:
            if existing is not None and _kind(existing) == stat.S_IFDIR:
                self._chmod_if_needed(target, existing, info)
            else:
                self._make_room(target, existing)
                self._mkdir(target, info)
            self._children(source, target, fresh=_kind(existing) != stat.S_IFDIR)
        # sockets, fifos and devices are not copied

    def _make_room(self, target: str, existing: _Remote) -> None:
        """Remove a remote entry of another type that stands where ``target`` goes."""
        if _kind(existing) == stat.S_IFDIR:
            raise IsADirectoryError(f"remote {target} is a directory; not replacing it")
        if existing is not None:
            self.sftp.remove(target)

    def _mkdir(self, target: str, info: os.stat_result) -> None:
        self.sftp.mkdir(target)
        self.sftp.chmod(target, stat.S_IMODE(info.st_mode))  # mkdir's mode meets a umask

    def _chmod_if_needed(
        self, target: str, existing: paramiko.SFTPAttributes, info: os.stat_result
    ) -> None:
        if _permissions(existing) != stat.S_IMODE(info.st_mode):
            self.sftp.chmod(target, stat.S_IMODE(info.st_mode))

    def _file(self, source: Path, target: str, existing: _Remote, info: os.stat_result) -> None:
        if (
            existing is not None
            and _kind(existing) == stat.S_IFREG
            and existing.st_size == info.st_size
            and existing.st_mtime == int(info.st_mtime)
        ):
            self._chmod_if_needed(target, existing, info)
            self.unchanged += 1
            return
        if _kind(existing) != stat.S_IFREG:
            self._make_room(target, existing)  # never write through a remote symlink
        self.sftp.put(str(source), target)
        self.sftp.chmod(target, stat.S_IMODE(info.st_mode))
        self.sftp.utime(target, (int(info.st_atime), int(info.st_mtime)))
        self.copied += 1

    def _symlink(self, source: Path, target: str, existing: _Remote) -> None:
        link = os.readlink(source)
        if _kind(existing) == stat.S_IFLNK and self.sftp.readlink(target) == link:
            self.unchanged += 1
            return
        self._make_room(target, existing)
        self.sftp.symlink(link, target)
        self.copied += 1
