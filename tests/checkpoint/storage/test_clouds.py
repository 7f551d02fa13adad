"""Azure Blob Storage and Google Cloud Storage as backends, against real servers on loopback
(Azurite; the GCS emulator behind the proxy that keeps GCS's create precondition): a new object
by the store's own precondition, two writers racing for a name and for the lease, a real
checkpoint read as it reads on a local disk, and the commands that read it."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from checkpoint.analysis.checks import validate
from checkpoint.cleanup.apply import delete_with_redrive
from checkpoint.errors import LeaseHeld, StorageError
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.safety.lease import lease_for
from checkpoint.storage import Storage
from checkpoint.storage.azure import AzureBackend
from testbed.azurite import ACCOUNT
from testbed.copying import copy_checkpoint, hadoop_checksum, mark_folders, upload_checkpoint
from tests.support.cli import ckpt
from tests.support.clouds import abfs_url


def _race(n: int, attempt: Callable[[int], object]) -> tuple[list[int], list[BaseException]]:
    """`attempt(i)` for i < n in n threads released at once: who returned, and what the others raised."""
    gate, won, lost = threading.Barrier(n), [], []

    def one(i: int) -> None:
        gate.wait()
        try:
            attempt(i)
            won.append(i)
        except BaseException as exc:  # noqa: BLE001 - every outcome is counted
            lost.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return won, lost


def test_two_writers_racing_for_a_name_one_wins_and_the_other_is_refused(cloud_store, tmp_path) -> None:
    """Create-if-absent is the store's own precondition (If-None-Match: * on Blob, ifGenerationMatch=0
    on GCS): of eight writers released at once on one name, one wins and the seven others get
    FileExistsError; the object holds the winner's bytes. The same for an upload from a file (a
    snapshot published by compaction), and a name already there is never replaced."""
    storage = Storage(f"{cloud_store['protocol']}://{cloud_store['base']}")
    assert isinstance(storage.backend, cloud_store["backend"])
    won, lost = _race(8, lambda i: storage.write_if_absent("lease/7.json", b"writer %d" % i, ".tmp-"))
    assert len(won) == 1 and len(lost) == 7 and all(isinstance(e, FileExistsError) for e in lost), lost
    assert storage.read_bytes("lease/7.json", limit=100) == b"writer %d" % won[0]

    files = []
    for i in range(4):
        files.append(tmp_path / f"{i}.zip")
        files[-1].write_bytes(bytes([i]) * 300_000)
    won, lost = _race(4, lambda i: storage.put_new(str(files[i]), "state/0/0/12.zip", ".tmp-"))
    assert len(won) == 1 and all(isinstance(e, FileExistsError) for e in lost), lost
    assert storage.read_bytes("state/0/0/12.zip", limit=400_000) == files[won[0]].read_bytes()
    with pytest.raises(FileExistsError):
        storage.write_if_absent("state/0/0/12.zip", b"over it", ".tmp-")


def test_the_lease_has_one_holder_when_two_actions_race_for_it(cloud_store) -> None:
    """The maintenance lease rests on create-if-absent: two actions that ask for it at once on the
    same checkpoint, one holds it, the other is refused naming it; once given back, it is free."""
    storage = Storage(f"{cloud_store['protocol']}://{cloud_store['base']}/orders")
    held = []

    def take(i: int) -> None:
        held.append(lease_for(storage, f"action {i}").acquire())

    won, lost = _race(2, take)
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], LeaseHeld), lost
    held[0].release()
    lease_for(storage, "after").acquire().release()


def test_a_real_checkpoint_reads_as_on_a_local_disk_and_its_commands_answer(cloud_store, corpus) -> None:
    """A checkpoint a real query wrote, uploaded as Spark's connector would have written it: the
    model is the local one's (batches, stores, files), validation finds what it finds there (the
    long chain), and `ckpt validate`, `lineage` and `inspect` answer on its URL as on the local
    copy."""
    local = corpus["long_chain"]
    url = upload_checkpoint(
        cloud_store["fs"],
        local,
        f"{cloud_store['base']}/long_chain",
        cloud_store["protocol"],
        cloud_store["spark"](f"{cloud_store['base']}/long_chain"),
    )
    here, there = load_checkpoint(str(local)), load_checkpoint(url)
    assert there.latest_committed_batch == here.latest_committed_batch
    assert sorted(map(str, there.stores)) == sorted(map(str, here.stores))
    assert {f.rel for f in there.files} == {f.rel for f in here.files if not hadoop_checksum(f.rel)}
    found, expected = validate(there), validate(here)
    assert found.ok and [f.code for f in found.findings] == [f.code for f in expected.findings]
    for command in ("validate", "lineage", "inspect"):
        # A store's command beside another suite worker's may take minutes: the limit is generous.
        out, local_out = ckpt(command, url, "--json", timeout=600), ckpt(command, str(local), "--json")
        assert out.returncode == local_out.returncode, (command, out.stderr[-2000:])
        assert (
            "Traceback" not in out.stderr
            and json.loads(out.stdout).keys() == json.loads(local_out.stdout).keys()
        )


def test_a_url_for_the_store_names_its_backend(cloud_store) -> None:
    """Each spelling Spark and fsspec use for the store reaches its own backend, not the generic one,
    and that backend names no Hadoop checksum beside a file: the store's connector writes none, so
    a copy or a snapshot published there makes none."""
    spellings = {"azure": ("az://c/x", "abfs://c/x", "abfss://c/x"), "gcs": ("gs://b/x", "gcs://b/x")}
    for url in spellings[cloud_store["name"]]:
        assert isinstance(Storage(url).backend, cloud_store["backend"]), url
        assert Storage(url).sidecars("5.zip") == [], url


def test_hadoops_account_qualified_azure_urls_name_the_same_place(azure, corpus, tmp_path) -> None:
    """Spark's ABFS connector names an Azure place with its account (`abfss://container@account
    .dfs.core.windows.net/key`) and writes that into a transformWithState checkpoint's schema
    paths. That URL is the `az://` URL's place, read alike; one naming an account the credentials
    do not reach is refused; the checkpoint validates as its local copy does, a copy whose paths
    name another account is found moved, and a fork there writes the spelling Spark resolves."""
    from checkpoint.analysis.findings import FindingCode
    from checkpoint.errors import StorageError
    from checkpoint.format import parse_operator_metadata

    server, _, container = azure
    fs, base, name = server.filesystem(), f"{container}/{uuid.uuid4().hex[:8]}", "list_state"
    where = f"{base}/{name}"
    upload_checkpoint(fs, corpus[name], where, "az", abfs_url(where))
    storage = Storage(abfs_url(where))
    assert storage.url == f"az://{where}" and isinstance(storage.backend, AzureBackend)
    assert storage.spark_url == abfs_url(where)
    with pytest.raises(StorageError, match=f"names the account elsewhere1; the credentials reach {ACCOUNT}"):
        Storage(abfs_url(where, "elsewhere1"))

    local = copy_checkpoint(corpus[name], tmp_path / "local")
    codes = [f.code for f in validate(load_checkpoint(str(local))).findings]
    assert [f.code for f in validate(load_checkpoint(storage)).findings] == codes
    for url in (abfs_url(where), f"az://{where}"):
        out, local_out = ckpt("validate", url, "--json"), ckpt("validate", str(local), "--json")
        assert (out.returncode, out.stderr) == (local_out.returncode, ""), out.stderr[-2000:]

    # Schema paths naming another account, or a host that is no account's: moved, not unreadable.
    sovereign = abfs_url(f"{base}/sovereign").replace(".windows.net", ".chinacloudapi.cn")
    for moved, spark_root in (
        (f"{base}/moved", abfs_url(f"{base}/moved", "elsewhere1")),
        (f"{base}/sovereign", sovereign),
    ):
        upload_checkpoint(fs, corpus[name], moved, "az", spark_root)
        found = {f.code for f in validate(load_checkpoint(f"az://{moved}")).findings}
        assert FindingCode.MOVED_CHECKPOINT in found, (spark_root, found)
    out = ckpt("validate", f"az://{container.upper()}/{name}")  # Azure names no container so
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and len(out.stderr) < 400, out.stderr
    assert "InvalidResourceName" in out.stderr, out.stderr

    inside = ckpt("fork", f"az://{where}", abfs_url(f"{where}/sub"))  # one place, two spellings
    assert inside.returncode == 2 and "overlap (az://" in inside.stderr, inside.stderr
    assert "abfs://" not in inside.stderr and "resolves to" not in inside.stderr, inside.stderr

    out = ckpt("fork", f"az://{where}", abfs_url(f"{base}/forked"), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    forked = load_checkpoint(f"az://{base}/forked")
    assert [f.code for f in validate(forked).findings] == codes
    metadata = [parse_operator_metadata(fs.cat(r), r) for r in fs.find(f"{base}/forked/state") if "/v2/" in r]
    paths = [p for meta in metadata for store in meta.stores for p in store.schema_paths]
    assert paths and all(p.startswith(abfs_url(f"{base}/forked") + "/state/") for p in paths), paths


def _files(fs, base: str) -> set[str]:
    return {p[len(base) + 1 :] for p in fs.find(base)}


def test_azure_deletes_in_blob_batches_each_file_answered_on_its_own(azure) -> None:
    """600 blobs and a name already gone are deleted in three Blob Batch requests of 256 at most:
    each file is answered on its own, so a leased blob is named as not deleted (the store's code
    first) and the others go; a missing one counts as deleted, once found gone. A single file is
    one Delete Blob, by its exact name (a tab in it too). A store that refuses the batch as a whole
    (one without Blob Batch, or credentials that may delete but not batch) gets one Delete Blob a
    file, each answered on its own."""
    from azure.storage.blob import BlobServiceClient

    server, proxy, container = azure
    folder = f"batches-{uuid.uuid4().hex[:8]}"
    base = f"{container}/{folder}"
    direct = server.filesystem()
    names = [f"state/0/{i}/{v}.delta" for i in range(6) for v in range(100)]
    direct.pipe({f"{base}/{n}": b"x" for n in names})
    leased = BlobServiceClient.from_connection_string(server.connection_string())
    lease = leased.get_blob_client(container, f"{folder}/{names[7]}").acquire_lease()
    storage = Storage(f"az://{base}")

    proxy.reset()
    failed = storage.delete_batch([*names, "state/0/9/1.delta"])
    # Azurite's failures echo no request id: the missing one is found gone by a HEAD
    assert dict(proxy.counts()) == {"batch": 3, "stat": 1}
    assert list(failed) == [names[7]] and failed[names[7]].startswith("LeaseIdMissing: 412"), failed
    assert sorted(direct.find(base)) == [f"{base}/{names[7]}"]
    lease.release()

    tabbed = leased.get_container_client(container)
    for name in ("x\t.delta", "x.delta", "y.delta"):
        tabbed.upload_blob(f"{folder}/{name}", b"x")
    proxy.reset()
    assert storage.delete_batch(["x\t.delta"]) == {} and dict(proxy.counts()) == {"delete": 1}
    assert sorted(direct.find(base)) == [f"{base}/{n}" for n in (names[7], "x.delta", "y.delta")]

    for status, code in ((404, "UnsupportedHttpVerb"), (403, "AuthorizationPermissionMismatch")):
        proxy.refuse_batches = (status, code)
        try:
            proxy.reset()
            assert storage.delete_batch([names[7], "x.delta"]) == {}
            assert dict(proxy.counts()) == {"batch": 1, "delete": 2}
            assert direct.find(base) == [f"{base}/y.delta"]
            direct.pipe({f"{base}/{n}": b"x" for n in (names[7], "x.delta")})
        finally:
            proxy.refuse_batches = None


def test_azure_blobs_answered_server_busy_are_sent_again_then_named_as_not_deleted(azure) -> None:
    """A throttled account answers a batch's subrequests `503 ServerBusy` each: cleanup's re-drive
    sends those blobs again after a back-off, and what stays busy past the last attempt is named
    as not deleted, with the store's code first, and is still there."""
    server, proxy, container = azure
    base = f"{container}/busy-{uuid.uuid4().hex[:8]}"
    direct = server.filesystem()
    names = [f"state/0/0/{v}.delta" for v in range(1, 4)]
    direct.pipe({f"{base}/{n}": b"x" for n in names})
    storage = Storage(f"az://{base}")
    sleeps: list[float] = []
    try:
        proxy.reset()
        proxy.busy_batches = 1
        assert delete_with_redrive(storage, names, 3, sleeps.append, {}) == {}
        assert dict(proxy.counts()) == {"batch": 2} and sleeps == [0.2]
        assert direct.find(base) == []

        direct.pipe({f"{base}/{n}": b"x" for n in names})
        proxy.reset()
        proxy.busy_batches = 5
        failed = delete_with_redrive(storage, names, 3, sleeps.append, {})
        assert sorted(failed) == names, failed
        assert all(why.startswith("ServerBusy: 503") for why in failed.values()), failed
        assert dict(proxy.counts()) == {"batch": 3} and sleeps == [0.2, 0.2, 0.4]
        assert sorted(direct.find(base)) == [f"{base}/{n}" for n in names]
    finally:
        proxy.busy_batches = 0


def test_azure_credentials_without_a_synchronous_form_delete_a_blob_at_a_time(monkeypatch) -> None:
    """Blob Batch goes through the SDK's synchronous client: a token credential the caller made
    for the asynchronous one cannot sign it, so those deletes go one at a time (adlfs' own twin
    of a credential it made is used)."""
    import adlfs

    class AsyncToken:  # what azure.identity.aio gives: an awaited get_token
        async def get_token(self, *scopes, **kwargs):
            raise AssertionError("never asked: nothing is sent")

    class SyncToken:  # what azure.identity gives
        def get_token(self, *scopes, **kwargs):
            raise AssertionError("never asked: nothing is sent")

    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)  # adlfs would take it first
    fs = adlfs.AzureBlobFileSystem(account_name=ACCOUNT, credential=AsyncToken(), skip_instance_cache=True)
    assert AzureBackend(fs)._sync_service() is None
    fs.sync_credential = SyncToken()  # adlfs' twin of a credential it made itself
    assert AzureBackend(fs)._sync_service() is not None


def test_the_gcs_proxy_keeps_the_precondition_the_emulator_ignores(gcs) -> None:
    """The emulator alone overwrites an object on `ifGenerationMatch=0`; through the proxy the
    upload is refused with 412 as GCS documents, for a one-request upload and a resumable one."""
    server, proxy, bucket = gcs
    base = f"{bucket}/{uuid.uuid4().hex[:8]}"
    direct = server.filesystem()
    direct.pipe_file(f"{base}/x", b"1")
    direct.pipe_file(f"{base}/x", b"2", mode="create")  # the emulator's own answer: replaced
    assert direct.cat(f"{base}/x") == b"2"
    proxied = server.filesystem(proxy.endpoint)
    with pytest.raises(FileExistsError):
        proxied.pipe_file(f"{base}/x", b"3", mode="create")
    big = b"y" * (proxied.blocksize + 1)  # past one chunk: a resumable upload
    proxied.pipe_file(f"{base}/big", big, mode="create")
    with pytest.raises(FileExistsError):
        proxied.pipe_file(f"{base}/big", b"z" * len(big), mode="create")
    assert direct.cat(f"{base}/x") == b"2" and direct.cat(f"{base}/big") == big
    assert _files(direct, base) == {"x", "big"}


def test_folder_markers_are_folders_and_go_with_the_last_object_under_them(cloud_store) -> None:
    """Spark's GCS and Azure connectors write an empty object for each folder they make
    (`testbed.copying.mark_folders`). Every listing and a stat show one as a folder, never as a
    file, also where the folder holds nothing, while an empty file is a file; `remove_empty_folders`
    deletes the markers of the folders it is given once nothing else is under them (an empty file
    holds them), and never the parent's or a neighbour's whose name starts with the same."""
    fs, protocol, base = cloud_store["fs"], cloud_store["protocol"], f"{cloud_store['base']}/marked"
    folders = ("", "ck", "ck/a", "ck/a/b", "ck/c", "ck-live", "ck-live/x")
    mark_folders(fs, protocol, [f"{base}/{f}".rstrip("/") for f in folders])
    fs.pipe_file(f"{base}/ck/c/keep", b"")  # an empty file, as Spark writes some

    def objects() -> set[str]:
        fs.invalidate_cache()
        return set(fs.find(base, withdirs=True)) | set(fs.ls(base, detail=False))  # markers too

    def ours(name: str) -> bool:
        return name.rstrip("/") == f"{base}/ck" or name.startswith(f"{base}/ck/")

    before = objects()
    ck = Storage(f"{protocol}://{base}/ck")
    assert ck.list_dir("").folders == ("a", "c") and ck.list_dir("").files == ()
    assert ck.list_dir("a").folders == ("a/b",) and [f.rel for f in ck.list_dir("c").files] == ["c/keep"]
    assert [(f.rel, f.size) for f in ck.list_files()] == [("c/keep", 0)]
    assert ck.stat("a") is None and ck.stat("c/keep").size == 0
    parent = Storage(f"{protocol}://{base}")
    parent.remove_empty_folders(["ck", "ck/a", "ck/a/b", "ck/c"])
    gone = {o for o in before - objects() if "/ck/a" in o}
    assert gone and before - objects() == gone  # `ck` and `ck/c` hold `keep`: their markers stay
    fs.rm_file(f"{base}/ck/c/keep")
    parent.remove_empty_folders(["ck", "ck/a", "ck/a/b", "ck/c"])
    assert objects() == {o for o in before if not ours(o)}  # the parent's and the neighbour's stay


def test_a_name_with_an_empty_part_fails_a_walk_instead_of_looping(cloud_store) -> None:
    """An object `team//x` lists `team` among its own subfolders on both stores: discovery and a
    walk of a checkpoint's folders would list it for ever, and one that skipped it would miss `x`.
    Each walk fails, naming the folder (the door, `Storage.list_dir`). A flat listing names the file
    itself (`team//x`)."""
    from checkpoint.errors import StorageError
    from checkpoint.model import find_checkpoints

    fs, protocol = cloud_store["fs"], cloud_store["protocol"]
    base = f"{cloud_store['base']}/doubled"
    fs.pipe_file(f"{base}/team//x", b"x")
    root = Storage(f"{protocol}://{base}")
    for walk in (lambda: find_checkpoints(root), lambda: root.list_outside([]), lambda: list(root.pages())):
        with pytest.raises(StorageError, match="lists as inside itself: 'team'"):
            walk()
    assert [f.rel for f in root.list_files()] == ["team//x"]


def test_an_empty_object_reads_as_empty_and_a_missing_one_as_missing(cloud_store) -> None:
    """Azure refuses a range of an empty blob (416, InvalidRange, raised past adlfs as azure-core's
    error): that is an empty file. A missing object is missing, even when its name holds `416`
    (a snapshot's `11_..-4165-...zip` was once read as empty, and so as a broken zip)."""
    storage = Storage(f"{cloud_store['protocol']}://{cloud_store['base']}/empty")
    storage.write_if_absent("commits/0", b"", ".tmp-")
    assert storage.read_bytes("commits/0", limit=10) == b""
    assert storage.read_if_exists("state/0/0/11_51c4f939-5a7f-4165-9fe4.zip", limit=10) is None
    assert storage.read_many(["commits/0"], limit=10) == {"commits/0": b""}


def test_a_cleanup_there_then_a_fork_back_restarts_like_an_untouched_copy(
    cloud_store, spark, corpus, corpus_root, tmp_path
) -> None:
    """`ckpt gc --apply` on the store deletes what the same plan deletes on a local copy, and
    nothing else; the cleaned checkpoint forked back to a local disk (`ckpt fork`) restarts its
    real query to the state of an untouched copy: the proof by restart, as Hadoop's abfs and gs
    connectors are not in the registries this project installs from."""
    from testbed.restart import scenario_named
    from tests.support.state import restart_like_untouched

    name = "snapshots"  # snapshots every few versions: the changelogs before them go
    where = f"{cloud_store['base']}/{name}"
    url = upload_checkpoint(
        cloud_store["fs"], corpus[name], where, cloud_store["protocol"], cloud_store["spark"](where)
    )
    # Objects are dated by their upload: a grace and a quiet period of a second, on both copies.
    quick = ["--grace", "1s", "--unsafe-short-grace", "--quiet-period", "1s", "--unsafe-short-quiet-period"]
    quiet = [*quick, "--query-stopped", "--retain-batches", "2", "--json"]
    time.sleep(1.1)
    local = copy_checkpoint(corpus[name], tmp_path / "local")
    kept_locally = _cleaned_locally(local, quiet)
    out = ckpt("gc", url, *quiet, "--apply", timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    done = json.loads(out.stdout)
    assert done["deleted"] > 0 and done["failed"] == 0, done
    assert set(_files(cloud_store["fs"], where)) == kept_locally

    back = tmp_path / "back"
    out = ckpt("fork", url, str(back), "--json", timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    untouched = copy_checkpoint(corpus[name], tmp_path / "untouched")
    scenario = scenario_named(name)
    restart_like_untouched(spark, scenario, corpus_root / name, back, untouched, tmp_path / "more-input")


def _cleaned_locally(local, args: list[str]) -> set[str]:
    """What `ckpt gc --apply` keeps of a local copy, Hadoop's hidden checksums aside (no object
    store has them: `upload_checkpoint`)."""
    out = ckpt("gc", str(local), *args, "--apply")
    assert out.returncode == 0, out.stderr[-2000:]
    return {
        str(p.relative_to(local)) for p in local.rglob("*") if p.is_file() and not hadoop_checksum(p.name)
    }


def test_a_file_of_known_size_is_read_by_ranged_gets_alone(cloud_store) -> None:
    """A size from a listing is all a reader needs: adlfs' file asked for the blob's properties
    as it opened (a changelog's header on Azure was a HEAD and a GET; the fleet view's row cost a
    stat more than on S3 and GCS), and gcsfs' for the object's metadata and a listing."""
    data = bytes(range(256)) * 400  # 100 KiB
    cloud_store["fs"].pipe_file(f"{cloud_store['base']}/ranged/state/0/0/1.changelog", data)
    storage = Storage(f"{cloud_store['protocol']}://{cloud_store['base']}/ranged")
    proxy = cloud_store["proxy"]
    proxy.reset()
    with storage.open("state/0/0/1.changelog", block_size=16 << 10, size=len(data)) as fh:
        head = fh.read(20)
        fh.seek(50_000)
        middle = fh.read(10)
        fh.seek(0)
        whole = fh.read()
    assert (head, middle, whole) == (data[:20], data[50_000:50_010], data)
    assert proxy.counts() == {"get": 3}  # one a read: the rest of a file in one (io's own: 8 KiB each)
    # Deleted since its listing: the door's vanished file at the first read (the open sends nothing).
    cloud_store["fs"].rm_file(f"{cloud_store['base']}/ranged/state/0/0/1.changelog")
    with storage.open("state/0/0/1.changelog", size=len(data)) as fh:
        with pytest.raises(StorageError, match="file vanished while reading"):
            fh.read(10)


def test_a_changelog_gone_since_its_listing_fails_a_deep_validation_and_is_not_called_corrupt(
    cloud_store, corpus
) -> None:
    """Read by ranged GETs, a file's failed read is the door's StorageError, a CheckpointError,
    which the deep checks catch as damage: a failed read is the storage's, and raised, naming the
    file. (Here the read after the check fails too and raised before; a read that fails in the
    check alone and then answers was reported as a corrupt changelog: a review's finding, with no
    store here that fails one GET and answers the next.)"""
    from checkpoint.analysis.checks import ValidationOptions
    from checkpoint.errors import StorageError

    base = f"{cloud_store['base']}/gone"
    url = upload_checkpoint(cloud_store["fs"], corpus["long_chain"], base, cloud_store["protocol"],
                            cloud_store["spark"](base))  # fmt: skip
    ckpt_there = load_checkpoint(url)
    gone = next(f.rel for f in ckpt_there.files if f.rel.endswith(".changelog"))
    cloud_store["fs"].rm_file(f"{base}/{gone}")
    with pytest.raises(StorageError, match="file vanished while reading"):
        validate(ckpt_there, ValidationOptions(deep=True))
