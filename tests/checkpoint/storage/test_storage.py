"""Storage through fsspec: any URL works, and loading costs one listing plus one bulk read."""

from __future__ import annotations

import os
import uuid
from collections import Counter

import fsspec
import pytest

from checkpoint.analysis.report import inspect_summary
from checkpoint.errors import NotACheckpointError, OutsideCheckpointError, StorageError
from checkpoint.format.layout import FileKind
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.storage import Storage

IO_METHODS = {
    "find",
    "cat",
    "cat_file",
    "cat_ranges",
    "info",
    "exists",
    "isdir",
    "isfile",
    "ls",
    "stat",
    "size",
    "modified",
    "open",
}


class CountingFS:
    """Counts the filesystem calls our code makes (fsspec's own internal calls are not counted)."""

    def __init__(self, fs):
        self._fs, self.calls = fs, Counter()

    def __getattr__(self, name):
        attr = getattr(self._fs, name)
        if name not in IO_METHODS:
            return attr

        def call(*args, **kwargs):
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


def test_any_fsspec_url_gives_the_same_model(in_memory, corpus, loaded) -> None:
    url = in_memory("join")
    remote = inspect_summary(load_checkpoint(url))
    local = inspect_summary(loaded["join"])
    assert remote.pop("path") == url and local.pop("path") == str(corpus["join"])
    assert remote == local


def test_loading_is_one_listing_and_one_bulk_read(in_memory) -> None:
    storage = Storage(in_memory("long_chain"))
    counting = CountingFS(storage.fs)
    storage.fs = counting
    ckpt = load_checkpoint(storage)
    # One bulk read of ranges, each the bound of its kind plus a byte (checkpoint.format.sizes).
    assert counting.calls == Counter({"find": 1, "cat_ranges": 1})
    assert len(ckpt.batches) == 32

    counting.calls.clear()
    changelog = next(f for f in ckpt.files if f.kind == FileKind.CHANGELOG and f.what.version == 32)
    assert len(ckpt.read_changelog_header(changelog).lineage) == 31
    assert counting.calls == Counter({"open": 1})


def test_listing_failure_is_a_storage_error(in_memory) -> None:
    storage = Storage(in_memory("snapshots"))
    real = storage.fs

    class Broken:
        def __getattr__(self, name):
            if name == "find":
                raise AttributeError(name)
            return getattr(real, name)

        def find(self, *args, **kwargs):
            raise ConnectionResetError("connection reset by peer")

    storage.fs = Broken()
    with pytest.raises(StorageError, match="listing failed: connection reset by peer"):
        load_checkpoint(storage)


def test_a_file_vanishing_between_listing_and_read(in_memory) -> None:
    url = in_memory("snapshots")
    storage = Storage(url)
    files = storage.list_files()
    fsspec.filesystem("memory").rm(f"{storage.root}/commits/5")
    storage.list_files = lambda: files  # the listing saw commits/5; the read does not find it
    with pytest.raises(StorageError, match="vanished"):
        load_checkpoint(storage)


def test_unknown_protocol_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.delenv("CKPT_UNPROVEN_STORAGE", raising=False)
    with pytest.raises(StorageError, match="nosuchproto:// is not a proven store"):
        Storage("nosuchproto://bucket/ckpt")
    monkeypatch.setenv("CKPT_UNPROVEN_STORAGE", "1")
    for url in ("nosuchproto://bucket/ckpt", "reference://"):  # the second wants more arguments
        with pytest.raises(StorageError, match="cannot open storage"):
            Storage(url)


def test_a_path_read_from_a_checkpoint_names_this_place_or_another() -> None:
    """`is_at` reads a URL out of a checkpoint's files (a schema path): a spelling no location
    has (user info, a query) is another place, not a refusal of the whole checkpoint."""
    storage = Storage("/x/q")
    assert storage.is_at("file:/x/q") and storage.is_at("/x//q/")
    for other in ("/x/r", "s3://u:pw@b/x/q", "abfss://c@acct.dfs.core.windows.net.elsewhere.example/x/q",
                  "abfss://ckpts@acct.dfs.core.chinacloudapi.cn/x/q", "file:/x/q?sig=1"):  # fmt: skip
        assert not storage.is_at(other), other


def test_validation_reads_headers_and_zip_metadata_only(in_memory) -> None:
    from checkpoint.analysis.checks import ValidationOptions, validate

    storage = Storage(in_memory("long_chain"))
    ckpt = load_checkpoint(storage, strict=False)
    counting = CountingFS(storage.fs)
    storage.fs = counting
    validate(ckpt)
    assert counting.calls == Counter({"open": 4})  # the committed changelog header of each of 4 stores
    counting.calls.clear()
    validate(ckpt, ValidationOptions(deep=True))
    # deep: also every changelog of the four 32-long chains, streamed through one open each (a
    # chunk at a time, the CRC32C taken on the way), and each one's small sidecar read whole
    assert counting.calls["open"] == 4 + 4 * 32 and counting.calls["cat_file"] == 4 * 32


def test_snapshot_validation_opens_zips_not_ssts(in_memory) -> None:
    from checkpoint.analysis.checks import validate

    storage = Storage(in_memory("watermark"))
    ckpt = load_checkpoint(storage, strict=False)
    counting = CountingFS(storage.fs)
    storage.fs = counting
    validation = validate(ckpt)
    # Every zip Spark could load: the bases, and any other zip a committed lineage header names
    # (how far back a header reaches depends on when Spark's asynchronous uploads finished).
    zips = {f.rel for e in validation.lineage for f in [e.base] if f is not None}
    named = {
        z.rel
        for e in validation.lineage
        for v in (e.header.lineage if e.header and e.header.lineage else ())
        if (z := ckpt.stores[e.store].file(FileKind.ZIP, v.version, v.unique_id)) is not None
    }
    # One ranged header read per store, one whole read per small zip: never an SST.
    assert zips and counting.calls == Counter({"open": 4, "cat_file": len(zips | named)})


def test_a_local_listing_is_what_fsspec_finds(tmp_path, corpus) -> None:
    """Local listings are built from os.scandir (a quarter of fsspec's memory per file); they must
    list what fsspec's find lists: symlinks to files, to folders and to nothing as files, sized as
    their targets (a dangling one as 0), never followed; nested folders; nothing for a lone file."""
    import os
    import shutil

    from checkpoint.storage.generic import FsspecBackend

    root = tmp_path / "ckpt"
    shutil.copytree(corpus["snapshots"], root)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "big.zip").write_bytes(b"x" * 1234)
    os.symlink(tmp_path / "elsewhere" / "big.zip", root / "state" / "0" / "0" / "9_link.zip")
    os.symlink(tmp_path / "elsewhere", root / "state" / "0" / "linked-folder")
    os.symlink(tmp_path / "nowhere", root / "commits" / "99")
    storage = Storage(str(root))
    fs, prefix = fsspec.filesystem("file"), storage.root + "/"
    for under in ("", "state/0", "commits", "commits/0", "no-such-folder"):
        top = storage.full(under)
        try:
            found = FsspecBackend(fs).find(top, prefix)
        except FileNotFoundError:
            found = []
        expected = sorted(found, key=lambda f: f.rel)
        assert [(f.rel, f.size, f.mtime, f.link) for f in storage.list_files(under)] == [
            (f.rel, f.size, f.mtime, f.link) for f in expected
        ], under
    links = {f.rel: f.size for f in storage.list_files() if f.link}
    assert set(links) == {"state/0/0/9_link.zip", "state/0/linked-folder", "commits/99"}
    assert (links["state/0/0/9_link.zip"], links["commits/99"]) == (1234, 0)
    # One folder (os.scandir too): what fsspec's `ls` shows, a link as a file; a stat as its `info`.
    fsspec_backend = FsspecBackend(fs)
    for under in ("", "state/0", "state/0/0", "commits", "commits/0", "no-such-folder"):
        mine, theirs = storage.list_dir(under), fsspec_backend.ls(storage.full(under), prefix)
        assert (mine.exists, mine.folders) == (theirs.exists, theirs.folders), under
        assert [(f.rel, f.size, f.mtime) for f in mine.files] == [
            (f.rel, f.size, f.mtime) for f in theirs.files
        ]
    for rel in ("metadata", "commits/99", "state/0", "no-such-file"):
        assert storage.stat(rel) == fsspec_backend.stat(storage.full(rel), rel), rel
    with pytest.raises(OutsideCheckpointError):  # a link outside is not followed, not even for its size
        storage.stat("state/0/0/9_link.zip")


def test_a_file_is_outside_when_it_or_its_folder_leads_out(tmp_path) -> None:
    """Cleanup's guard: a link leading out, or a plain file in a folder that really lies elsewhere
    (its folder resolved once for all its files), is outside; the rest is where it says."""
    from checkpoint.storage import FileInfo

    root, elsewhere = tmp_path / "ckpt", tmp_path / "elsewhere"
    (root / "state" / "a").mkdir(parents=True)
    elsewhere.mkdir()
    for name in ("x", "w"):
        (root / "state" / "a" / name).write_text(name)
    (elsewhere / "y").write_text("y")
    (root / "state" / "b").symlink_to(elsewhere, target_is_directory=True)
    (root / "state" / "a" / "z").symlink_to(elsewhere / "y")
    (root / "state" / "a" / "v").symlink_to(root / "state" / "a" / "x")
    files = [FileInfo("state/a/x", 1, 0.0, False), FileInfo("state/a/w", 1, 0.0, None),
             FileInfo("state/b/y", 1, 0.0, False), FileInfo("state/a/z", 1, 0.0, None),
             FileInfo("state/a/v", 1, 0.0, True)]  # fmt: skip
    assert Storage(str(root)).outside(files, "state") == {
        "state/b/y": str(elsewhere / "y"),
        "state/a/z": str(elsewhere / "y"),
    }


def test_aws_max_attempts_sets_the_requests_per_call_unless_an_option_does(monkeypatch) -> None:
    from checkpoint.storage import options_from_env

    def attempts(options=None):
        return options_from_env("s3://b/q", options)["config_kwargs"]["retries"]["total_max_attempts"]

    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    assert attempts() == 10
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    assert attempts() == 3
    assert attempts({"config_kwargs": {"retries": {"total_max_attempts": 5}}}) == 5
    for bad in ("x", "0", "-2"):
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", bad)
        with pytest.raises(StorageError, match="AWS_MAX_ATTEMPTS"):
            attempts()


def test_a_head_that_cannot_be_read_is_named_and_no_file_stays_open(tmp_path) -> None:
    """Locally `read_heads` opens a chunk's files together (each hinted to the kernel), then reads
    them: a file that became a folder, or vanished, since the listing stops it, naming that file,
    and every file opened for the chunk is closed."""
    root = tmp_path / "ckpt"
    (root / "state").mkdir(parents=True)
    for i in range(10):
        (root / "state" / f"{i}.changelog").write_bytes(bytes([i]) * 100)
    storage = Storage(str(root))
    files = storage.list_files("state")
    open_before = len(os.listdir("/proc/self/fd"))
    changed = root / "state" / "5.changelog"
    changed.unlink()
    changed.mkdir()
    with pytest.raises(StorageError, match="5.changelog: read failed"):
        list(storage.read_heads(files, 64))
    changed.rmdir()
    with pytest.raises(StorageError, match="5.changelog: file vanished"):
        list(storage.read_heads(files, 64))
    assert len(os.listdir("/proc/self/fd")) == open_before
    assert list(storage.read_heads(files[:5], 64)) == [bytes([i]) * 64 for i in range(5)]


def test_heads_are_each_files_first_bytes_in_order_and_a_vanished_file_is_named(
    tmp_path, monkeypatch
) -> None:
    """`read_heads` gives the first bytes of many files, in the order asked (past a chunk's worth
    of them), a short file whole and an empty one without a read; a file gone
    since its listing stops it with `vanished`, naming that file. Local disk and fsspec's memory
    filesystem (the object-store path: ranged reads of a chunk at once) give the same."""
    sizes = [0, 5, 64, 65, 5000] * 14  # 70 files: more than one chunk of requests at once
    data = {f"state/0/0/{i:03d}.changelog": bytes([i]) * size for i, size in enumerate(sizes)}
    local = tmp_path / "ckpt"
    for rel, content in data.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(content)
    memory = f"/{uuid.uuid4().hex}/ckpt"
    fsspec.filesystem("memory").pipe({f"{memory}/{rel}": content for rel, content in data.items()})
    monkeypatch.setenv("CKPT_UNPROVEN_STORAGE", "1")  # read only
    try:
        for url in (str(local), f"memory://{memory}"):
            storage = Storage(url)
            files = storage.list_files("state")
            assert [f.rel for f in files] == list(data)
            before = storage.calls.snapshot()
            assert list(storage.read_heads(reversed(files), 64)) == [d[:64] for d in reversed(data.values())]
            assert storage.calls.snapshot() - before == Counter({"read": sum(1 for s in sizes if s)})
            gone = files[66].rel
            storage.fs.rm(storage.full(gone))
            with pytest.raises(StorageError, match=f"{gone}: file vanished"):
                list(storage.read_heads(files, 64))
    finally:
        fsspec.filesystem("memory").rm(memory, recursive=True)


def test_a_storage_unpickled_elsewhere_keeps_one_retry_policy() -> None:
    """A Storage goes to Spark tasks and to planning workers by pickle, where its S3 filesystem is
    built anew from its arguments: botocore alone retries there too, s3fs's own loop stays off."""
    import pickle

    import s3fs

    storage = Storage("s3://bucket/ckpt", {"key": "k", "secret": "s", "client_kwargs": {"region_name": "x"}})
    assert storage.fs.retries == 1
    data = pickle.dumps(storage)
    s3fs.S3FileSystem.clear_instance_cache()  # as in another process: no instance to reuse
    elsewhere = pickle.loads(data)
    assert elsewhere.fs is not storage.fs and elsewhere.fs.retries == 1


def test_a_file_is_put_under_a_new_name_only_and_never_over_another(tmp_path) -> None:
    """`put_new` (a compacted snapshot's publish): the bytes land whole under a free name; over a
    taken one it raises and the file there keeps its bytes, with no temp file left beside it."""
    source = tmp_path / "source"
    source.write_bytes(b"x" * 100_000)
    storage = Storage(str(tmp_path / "root"))
    storage.put_new(str(source), "state/0/0/12.snapshot", ".ckpt-maint-")
    assert storage.read_bytes("state/0/0/12.snapshot", limit=1 << 20) == source.read_bytes()
    storage.write("state/0/0/13.snapshot", b"theirs")
    with pytest.raises(FileExistsError):
        storage.put_new(str(source), "state/0/0/13.snapshot", ".ckpt-maint-")
    assert storage.read_bytes("state/0/0/13.snapshot", limit=1 << 20) == b"theirs"
    listed = sorted(f.rel for f in storage.list_files("state"))
    assert listed == ["state/0/0/12.snapshot", "state/0/0/13.snapshot"]


def test_a_walk_is_the_listing_a_page_at_a_time(tmp_path, corpus) -> None:
    """`Storage.pages` on a local disk: what one listing gives, in its order (names that sort
    around `/`: `a.x` before `a/b`, `a-b/`, `a0`), at most a page at a time, a link listed as
    itself and never followed; a root that is missing or a file is refused, as by the listing."""
    from testbed.copying import copy_checkpoint

    root = tmp_path / "ckpt"
    copy_checkpoint(corpus["join"], root)
    for rel in ("a/b", "a-b/c", "a.x", "a0", "Z", "é/ü", "new\nline"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    os.symlink(root / "a", root / "to-a")  # a link to a folder: a file of the listing, not walked
    storage = Storage(str(root))
    whole = storage.list_files()
    pages = list(storage.pages(page=7))
    assert [(f.rel, f.size, f.mtime, f.link) for p in pages for f in p] == [
        (f.rel, f.size, f.mtime, f.link) for f in whole
    ]
    assert max(map(len, pages)) <= 7 and [f.rel for f in whole] == sorted(f.rel for f in whole)
    assert "to-a" in {f.rel for f in whole} and "to-a/b" not in {f.rel for f in whole}
    for bad in (tmp_path / "missing", root / "Z"):
        with pytest.raises(NotACheckpointError, match="no such directory"):
            list(Storage(str(bad)).pages())


def test_a_walk_that_comes_out_of_order_is_refused(tmp_path) -> None:
    """A caller writes what a walk yields in order (a retirement manifest) and merges it with
    another: a backend whose listing is not in order fails the walk, never reorders it."""
    (tmp_path / "b").write_text("b")
    (tmp_path / "a").write_text("a")
    storage = Storage(str(tmp_path))
    real = storage.backend.pages

    def reversed_pages(top, prefix, page):
        for found in real(top, prefix, page):
            yield list(reversed(found))

    storage.backend.pages = reversed_pages  # type: ignore[method-assign]
    with pytest.raises(StorageError, match="came out of order"):
        list(storage.pages())


def test_a_folder_that_lists_as_inside_itself_fails_the_walk(tmp_path, monkeypatch) -> None:
    """An S3 key with an empty part (`state/0/1//x`) lists its folder among its own children: a
    walk would list it for ever. It fails, naming the folder."""
    from checkpoint.storage.files import Folder

    (tmp_path / "state" / "0").mkdir(parents=True)
    (tmp_path / "state" / "0" / "1.delta").write_bytes(b"x")
    storage = Storage(str(tmp_path))
    backend = type(storage.backend)
    real = backend.ls

    def looping(self, top: str, prefix: str) -> Folder:
        found = real(self, top, prefix)
        if top.endswith("/state/0"):
            return Folder(found.files, (*found.folders, top[len(prefix) :]), True)
        return found

    monkeypatch.setattr(backend, "ls", looping)
    with pytest.raises(StorageError, match="lists as inside itself"):
        list(storage.pages())


@pytest.mark.parametrize("walk", ["whole", "pages"])
@pytest.mark.parametrize("swapped", ["state", "state/0"])
def test_a_folder_swapped_for_a_link_while_it_is_walked_is_refused(
    tmp_path, monkeypatch, walk, swapped
) -> None:
    """A folder replaced by a link to somewhere else after its parent was listed, just before it
    is opened (`state/0`), or a folder above it so replaced (`state`, when `state/0` is opened),
    would be walked out of the checkpoint and the outside listed as its files: the walk is refused,
    naming where the folder now leads. A checkpoint that is itself a link is walked as before."""
    from checkpoint.storage import local

    real_root = tmp_path / "kept"
    (real_root / "state" / "0" / "0").mkdir(parents=True)
    (real_root / "state" / "0" / "0" / "1.delta").write_bytes(b"x")
    (tmp_path / "ckpt").symlink_to(real_root, target_is_directory=True)
    outside = tmp_path / "outside"
    (outside / "0" / "0").mkdir(parents=True)
    (outside / "0" / "0" / "secret").write_text("not the checkpoint's")
    (outside / "state" / "0" / "0").mkdir(parents=True)
    (outside / "state" / "0" / "0" / "secret").write_text("not the checkpoint's")
    storage = Storage(str(tmp_path / "ckpt"))
    listing = (lambda: [f for p in storage.pages() for f in p]) if walk == "pages" else storage.list_files
    assert [f.rel for f in listing()] == ["state/0/0/1.delta"]

    opened = os.open
    trigger = str(tmp_path / "ckpt" / "state/0")

    def swap_then_open(path, flags, *args, **kwargs):
        if path == trigger and not (real_root / swapped).is_symlink():
            os.rename(real_root / swapped, tmp_path / "moved-away")
            target = outside / "state" / "0" if swapped == "state/0" else outside / "state"
            (real_root / swapped).symlink_to(target, target_is_directory=True)
        return opened(path, flags, *args, **kwargs)

    monkeypatch.setattr(local.os, "open", swap_then_open)
    with pytest.raises(OutsideCheckpointError, match="replaced while it was listed, now at .*outside"):
        listing()


def test_a_url_with_a_query_is_refused_without_echoing_it() -> None:
    """A SAS token or a signature rides in a URL's query (`?sv=...&sig=...`): such a URL is refused
    before anything is opened, and the message shows the path, never the query; as a path, the
    query would have named objects and trails (`f9?sig=.../`)."""
    for url in (
        "az://c/streams/join?sv=2020&sig=SECRETSIG",
        "gs://b/x#sig=SECRETSIG",
        "s3://b/x?X-Amz-Signature=SECRETSIG",
    ):
        with pytest.raises(StorageError) as refused:
            Storage(url)
        assert "SECRETSIG" not in str(refused.value) and "query" in str(refused.value), url


def test_protocol_aliases_are_one_spelling() -> None:
    """One spelling per place, whichever of its aliases names it: Hadoop's account-qualified Azure
    URL (which Spark's ABFS connector writes into a checkpoint's schema paths) too, its account
    kept apart. A user and password never pass for a container and an account."""
    from checkpoint.storage import normalize_url
    from checkpoint.storage.urls import azure_account, redact

    assert normalize_url("s3a://b/k") == normalize_url("s3n://b/k/") == "s3://b/k"
    assert normalize_url("gcs://b//k") == "gs://b/k"
    assert (
        normalize_url("abfs://c/k")
        == normalize_url("abfss://c/k")
        == normalize_url("wasbs://c/k")
        == "az://c/k"
    )
    assert normalize_url("file://localhost/x/q") == normalize_url("file:/x/q") == "/x/q"
    # Another machine's disk is refused, not read below the working folder as `otherhost/x/q`
    for other in ("file://otherhost/x/q", "FILE://otherhost?sig=SECRETPW/x"):
        with pytest.raises(StorageError, match="names the host 'otherhost'") as refused:
            normalize_url(other)
        assert "SECRETPW" not in str(refused.value)
    with pytest.raises(StorageError, match="user or password") as refused:
        normalize_url("file://user:SECRETPW@otherhost/x/q")
    assert "SECRETPW" not in str(refused.value)
    qualified = "abfss://ckpts@acct1.dfs.core.windows.net/a//q/"
    assert (
        normalize_url(qualified)
        == normalize_url("wasbs://ckpts@ACCT1.blob.core.windows.net/a/q")
        == "az://ckpts/a/q"
    )
    assert azure_account(qualified) == "acct1" and azure_account("az://ckpts/a/q") is None
    assert redact(qualified) == qualified
    for userinfo in (
        "abfss://user:SECRETPW@acct1.dfs.core.windows.net/q",  # a password
        "abfss://ckpts@acct1.dfs.core.windows.net.elsewhere.example/q",  # another host
        "s3://ckpts@acct1.dfs.core.windows.net/q",  # not Azure's connector
        "abfss://ck_pts@acct1.dfs.core.windows.net/q",  # no container's name
    ):
        with pytest.raises(StorageError, match="user or password") as refused:
            normalize_url(userinfo)
        assert "SECRETPW" not in str(refused.value) and "***@" in str(refused.value), userinfo


def test_a_store_no_test_runs_against_is_refused_or_with_leave_read_and_never_written(
    monkeypatch, in_memory, corpus, tmp_path
) -> None:
    """A protocol outside the proven ones (local, S3, Azure, GCS) is refused in one line naming
    them. With the user's leave (CKPT_UNPROVEN_STORAGE=1) it is read through fsspec's generic
    calls, and every write is refused before a request (the CLI's commands on it:
    tests/cli/test_stores.py)."""
    from checkpoint.errors import UnprovenStorageError
    from checkpoint.storage import UNPROVEN_LEAVE

    monkeypatch.delenv(UNPROVEN_LEAVE, raising=False)
    url = in_memory("join")
    memory = fsspec.filesystem("memory")
    before = {p: memory.cat(p) for p in memory.find(url[len("memory://") :])}
    with pytest.raises(
        UnprovenStorageError, match=r"memory:// is not a proven store \(proven: local disks, s3://"
    ):
        Storage(url)
    monkeypatch.setenv(UNPROVEN_LEAVE, "yes")
    with pytest.raises(UnprovenStorageError, match="set it to 1 or leave it unset"):
        Storage(url)
    monkeypatch.setenv(UNPROVEN_LEAVE, "1")
    storage = Storage(url)
    assert len(load_checkpoint(storage).batches) == len(load_checkpoint(str(corpus["join"])).batches)
    source = tmp_path / "snapshot"
    source.write_bytes(b"x")
    writes = {
        "write": lambda: storage.write("commits/99", b"x"),
        "write_if_absent": lambda: storage.write_if_absent("commits/99", b"x", ".t-"),
        "put_new": lambda: storage.put_new(str(source), "state/0/0/99.snapshot", ".t-"),
        "put_file": lambda: storage.put_file(str(source), "state/0/0/99.snapshot"),
        "append": lambda: storage.append("_ckpt_audit/x", b"x"),
        "delete_batch": lambda: storage.delete_batch(["commits/0"]),
        "copy_to": lambda: Storage(str(corpus["join"])).copy_to("commits/0", storage, "commits/99", 1, ".t-"),
    }
    for name, write in writes.items():
        with pytest.raises(UnprovenStorageError, match="nothing writes there"):
            write()
            pytest.fail(f"{name} wrote")
    assert {p: memory.cat(p) for p in memory.find(url[len("memory://") :])} == before
