"""teamlead's session stores: the SDK's conformance suite, every optional method included,
against a real ``redis-server`` and a temp SQLite file; what they read back treated as
untrusted; the TTL on every Redis key; and :func:`teamlead.open_session_store`'s URLs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import pickle
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey
from click.testing import CliRunner

import teamlead
from teamlead._cli import main
from teamlead.sessions import (
    DEFAULT_TTL_S,
    RedisSessionStore,
    SessionStatus,
    SQLiteSessionStore,
    stored_sessions,
)

from .polling import poll
from .redis_server import REDIS_SERVER, RedisServer, free_port, redis_server

pytestmark = pytest.mark.anyio

needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
KEY: SessionKey = {"project_key": "proj", "session_id": "sess"}
SUB: SessionKey = {**KEY, "subpath": "subagents/agent-1"}
_names = itertools.count()


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
async def opened() -> AsyncIterator[list[Any]]:
    """Stores a test opened, closed in the test's own event loop after it."""
    stores: list[Any] = []
    yield stores
    for store in stores:
        await store.aclose()


def _redis_store(redis: RedisServer, opened: list[Any], **kwargs: Any) -> RedisSessionStore:
    store = RedisSessionStore(redis.url, namespace=f"teamlead:session:t{next(_names)}:", **kwargs)
    opened.append(store)
    return store


@needs_redis
async def test_the_redis_store_passes_the_sdk_conformance_suite_with_every_optional_method(
    redis: RedisServer, opened: list[Any]
) -> None:
    await run_session_store_conformance(lambda: _redis_store(redis, opened))


async def test_the_sqlite_store_passes_the_sdk_conformance_suite_with_every_optional_method(
    tmp_path: Path, opened: list[Any]
) -> None:
    def make() -> SQLiteSessionStore:
        store = SQLiteSessionStore(tmp_path / f"s{next(_names)}.db")
        opened.append(store)
        return store

    await run_session_store_conformance(make)


@needs_redis
async def test_every_redis_key_is_namespaced_and_expires(
    redis: RedisServer, opened: list[Any]
) -> None:
    import redis as redis_py

    store = RedisSessionStore(redis.url, ttl_s=120)
    opened.append(store)
    await store.append(KEY, [{"type": "user", "uuid": "u1"}])
    await store.append(SUB, [{"type": "assistant", "uuid": "u2"}])
    await store.put_status(SessionStatus(session_id="sess", project_key="proj", status="partial"))
    with redis_py.Redis.from_url(redis.url) as client:
        keys = [k.decode() for k in client.keys("*")]
        assert keys and all(k.startswith("teamlead:session:") for k in keys), keys
        ttls = {k: client.pttl(k) for k in keys}
    assert all(0 < ttl <= 120_000 for ttl in ttls.values()), ttls
    assert DEFAULT_TTL_S == 30 * 24 * 3600


@needs_redis
async def test_a_retried_batch_is_stored_once(redis: RedisServer, opened: list[Any]) -> None:
    store = _redis_store(redis, opened)
    batch: list[Any] = [{"type": "user", "uuid": "a"}, {"type": "mode"}]
    await store.append(KEY, batch)
    await store.append(KEY, batch)  # the SDK retried it after a timeout that still landed
    assert await store.load(KEY) == [*batch, {"type": "mode"}]  # no uuid: appended again


@needs_redis
async def test_sessions_and_subkeys_expired_behind_their_index_are_dropped_from_it(
    redis: RedisServer, opened: list[Any]
) -> None:
    import redis as redis_py

    store = RedisSessionStore(redis.url, ttl_s=120, namespace="teamlead:session:gone:")
    opened.append(store)
    other: SessionKey = {"project_key": "proj", "session_id": "other"}
    second: SessionKey = {**KEY, "subpath": "subagents/agent-2"}
    for key in (KEY, other, SUB, second):
        await store.append(key, [{"type": "user", "uuid": f"u-{key.get('subpath', '')}"}])
    with redis_py.Redis.from_url(redis.url) as client:  # as if they expired
        client.delete("teamlead:session:gone:entries:proj:other")
        client.delete("teamlead:session:gone:entries:proj:sess:subagents%2Fagent-2")
        assert [s["session_id"] for s in await store.list_sessions("proj")] == ["sess"]
        assert await store.list_subkeys(KEY) == ["subagents/agent-1"]
        assert client.zrange("teamlead:session:gone:index:proj", 0, -1) == [b"sess"]
        subkeys = client.smembers("teamlead:session:gone:subkeys:proj:sess")
        assert subkeys == {b"subagents/agent-1"}


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
async def test_a_used_store_travels_to_another_process_as_its_settings(
    kind: str, tmp_path: Path, opened: list[Any]
) -> None:
    """A Ray task gets the run's store pickled: a store that is connected (a client, its
    loop, a lock) comes back as the same store, unconnected, and connects where it is used."""
    with contextlib.ExitStack() as stack:
        store: Any = SQLiteSessionStore(tmp_path / "s.db")
        if kind == "redis":
            if REDIS_SERVER is None:
                pytest.skip("redis-server is not installed")
            url = stack.enter_context(redis_server(tmp_path)).url
            store = RedisSessionStore(url, ttl_s=120, namespace="teamlead:session:moved:")
        opened.append(store)
        await store.append(KEY, [{"type": "user", "uuid": "u1"}])  # connected now
        copy = pickle.loads(pickle.dumps(store))
        opened.append(copy)
        assert type(copy) is type(store) and repr(copy) == repr(store)
        if kind == "redis":
            assert (copy.ttl_s, copy._ns) == (120, "teamlead:session:moved:")
        await copy.append(KEY, [{"type": "assistant", "uuid": "u2"}])
        assert [e["uuid"] for e in await store.load(KEY) or []] == ["u1", "u2"]
        for each in opened:  # while the server still runs
            await each.aclose()


async def _sqlite_corrupted(tmp_path: Path, opened: list[Any]) -> SQLiteSessionStore:
    store = SQLiteSessionStore(tmp_path / "s.db")
    opened.append(store)
    await store.append(KEY, [{"type": "user", "uuid": "good"}])
    await store.aclose()
    with sqlite3.connect(tmp_path / "s.db") as db:
        rows = ["not json", "[1, 2]", json.dumps({"type": 7}), "{" * 100_000]
        for body in rows:
            db.execute(
                "INSERT INTO teamlead_session_entries (project_key, session_id, subpath, "
                "uuid, body) VALUES ('proj', 'sess', '', NULL, ?)",
                (body,),
            )
        db.execute("UPDATE teamlead_session_summaries SET data = 'oops'")
    return store


async def _redis_corrupted(redis: RedisServer, opened: list[Any]) -> RedisSessionStore:
    import redis as redis_py

    store = _redis_store(redis, opened)
    await store.append(KEY, [{"type": "user", "uuid": "good"}])
    ns = store._ns
    with redis_py.Redis.from_url(redis.url) as client:
        entries = f"{ns}entries:proj:sess"
        client.rpush(entries, "not json", "[1, 2]", json.dumps({"type": 7}), "{" * 100_000)
        client.rpush(entries, b"\xff\xfe")  # not UTF-8
        client.set(f"{ns}summary:proj:sess", "oops")
        client.set(f"{ns}subkeys:proj:sess", "a string where a set belongs")
    return store


async def test_a_summary_written_at_no_possible_time_is_unreadable_and_folded_anew(
    tmp_path: Path, opened: list[Any]
) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    opened.append(store)
    await store.append(KEY, [{"type": "user", "uuid": "a"}])
    await store.aclose()
    with sqlite3.connect(tmp_path / "s.db") as db:  # a float past any SQLite INTEGER
        db.execute("UPDATE teamlead_session_summaries SET mtime = 1e300")
    assert await store.list_session_summaries("proj") == []
    await store.append(KEY, [{"type": "user", "uuid": "b"}])
    [summary] = await store.list_session_summaries("proj")
    assert 0 < summary["mtime"] < 2**63


@needs_redis
async def test_a_redis_summary_or_index_at_no_possible_time_is_never_raised(
    redis: RedisServer, opened: list[Any]
) -> None:
    import redis as redis_py

    store = _redis_store(redis, opened)
    await store.append(KEY, [{"type": "user", "uuid": "a"}])
    ns = store._ns
    huge = '{"session_id": "sess", "mtime": 1' + "0" * 400 + ', "data": {}}'
    with redis_py.Redis.from_url(redis.url) as client:
        client.set(f"{ns}summary:proj:sess", huge)
    assert await store.list_session_summaries("proj") == []
    with redis_py.Redis.from_url(redis.url) as client:
        client.zadd(f"{ns}index:proj", {"sess": float("inf")})
    assert await store.list_sessions("proj") == []


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
async def test_unreadable_entries_are_skipped_with_one_warning_never_raised(
    kind: str,
    tmp_path: Path,
    opened: list[Any],
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if kind == "redis":
        store: Any = await _redis_corrupted(request.getfixturevalue("redis"), opened)
    else:
        store = await _sqlite_corrupted(tmp_path, opened)
    with caplog.at_level(logging.WARNING, logger="teamlead.sessions"):
        assert await store.load(KEY) == [{"type": "user", "uuid": "good"}]
        assert await store.load(KEY) == [{"type": "user", "uuid": "good"}]
        assert await store.list_session_summaries("proj") == []
        assert await store.list_subkeys(KEY) == []
    entries = [r for r in caplog.records if "unreadable entr" in r.getMessage()]
    assert len(entries) == 1, caplog.text  # once per kind, not per read
    # the store still takes appends where something else wrote keys of the wrong type
    await store.append(SUB, [{"type": "assistant", "uuid": "s"}])
    assert await store.list_subkeys(KEY) == ["subagents/agent-1"]


async def test_stored_sessions_lists_every_project_with_its_last_status(
    tmp_path: Path, opened: list[Any]
) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    opened.append(store)
    await store.append({"project_key": "a", "session_id": "old"}, [{"type": "user"}])
    await store.append({"project_key": "b", "session_id": "new"}, [{"type": "user"}])
    await store.put_status(
        SessionStatus(session_id="new", project_key="b", status="completed", agents=2, used=2)
    )
    listed = await stored_sessions(store)
    assert [(s.session_id, s.project_key) for s in listed] == [("new", "b"), ("old", "a")]
    assert listed[0].status is not None and listed[0].status.used == 2
    assert listed[1].status is None  # no teamlead run ended on it
    assert [s.session_id for s in await stored_sessions(store, "a")] == ["old"]


@needs_redis
async def test_an_unreachable_redis_raises_one_session_store_error(opened: list[Any]) -> None:
    store = RedisSessionStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)
    opened.append(store)
    with pytest.raises(teamlead.SessionStoreError) as caught:
        await store.append(KEY, [{"type": "user"}])
    assert "append failed" in str(caught.value) and caught.value.store.startswith("Redis at")


@needs_redis
def test_a_store_used_from_successive_event_loops_closes_its_client_in_each(
    redis: RedisServer,
) -> None:
    import redis as redis_py

    store = RedisSessionStore(redis.url)
    made: list[Any] = []  # held, so that no garbage collection closes a client left behind

    async def use() -> None:
        await store.ping()
        made.append(store._client)

    def connections() -> int:
        with redis_py.Redis.from_url(redis.url) as client:
            return sum(c["name"] == "teamlead" for c in client.client_list())

    for _ in range(3):
        anyio.run(use)
    assert len({id(client) for client in made}) == 3
    assert poll(lambda: connections() == 0, within_s=10), connections()
    anyio.run(store.aclose)  # in a loop of its own, after its client's loop closed


@pytest.mark.parametrize(
    ("content", "said"),
    [
        pytest.param(b"this is not a database" * 100, "is not an SQLite database", id="junk"),
        pytest.param(b"", "is an empty file", id="empty"),
    ],
)
async def test_a_file_that_is_no_sqlite_database_is_refused_and_left_untouched(
    tmp_path: Path, opened: list[Any], content: bytes, said: str
) -> None:
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "notes.db"
    path.write_bytes(content)
    path.chmod(0o644)
    store = SQLiteSessionStore(path)
    opened.append(store)
    for attempt in (store.ping(), store.load(KEY), store.append(KEY, [{"type": "user"}])):
        with pytest.raises(teamlead.SessionStoreError) as refused:
            await attempt
        assert str(refused.value) == (
            f"session store SQLite at {path}: {said}; teamlead leaves it as it is and makes "
            "its database only where no file is: name a new path"
        )
    assert path.read_bytes() == content and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["notes.db"]  # noqa: ASYNC240 - no -wal, no temp


@pytest.mark.timeout(20)
async def test_a_fifo_where_the_database_would_be_is_refused_not_waited_on(
    tmp_path: Path, opened: list[Any]
) -> None:
    path = tmp_path / "sessions.db"
    os.mkfifo(path)  # nothing will ever write to it
    store = SQLiteSessionStore(path)
    opened.append(store)
    with pytest.raises(teamlead.SessionStoreError, match="is not a regular file"):
        await store.ping()


async def test_a_new_database_is_made_private_and_an_existing_one_keeps_its_mode(
    tmp_path: Path, opened: list[Any]
) -> None:
    made = SQLiteSessionStore(tmp_path / "new" / "s.db")
    opened.append(made)
    await made.append(KEY, [{"type": "user", "uuid": "u1"}])
    assert stat.S_IMODE((tmp_path / "new" / "s.db").stat().st_mode) == 0o600
    await made.aclose()
    (tmp_path / "new" / "s.db").chmod(0o640)  # the user's choice, on a database of theirs
    again = SQLiteSessionStore(tmp_path / "new" / "s.db")
    opened.append(again)
    assert [e["uuid"] for e in await again.load(KEY) or []] == ["u1"]
    assert stat.S_IMODE((tmp_path / "new" / "s.db").stat().st_mode) == 0o640


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("redis://127.0.0.1:6379/0", RedisSessionStore),
        ("rediss://:pw@127.0.0.1:6380/3?ttl=60", RedisSessionStore),
        ("sqlite:///tmp/sessions.db", SQLiteSessionStore),
        ("sqlite:relative/sessions.db", SQLiteSessionStore),
    ],
)
def test_open_session_store_opens_redis_and_sqlite_urls(url: str, kind: type) -> None:
    assert isinstance(teamlead.open_session_store(url), kind)


def test_a_redis_url_says_its_ttl() -> None:
    store = teamlead.open_session_store("redis://127.0.0.1:6379/0?ttl=60")
    assert isinstance(store, RedisSessionStore) and store.ttl_s == 60
    assert "ttl" not in store.url


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgres://db/1", "redis://HOST:PORT/DB, rediss://HOST:PORT/DB or sqlite:///PATH"),
        ("redis://127.0.0.1:6379/abc", "the Redis database must be a number"),
        ("redis://:secret@127.0.0.1/abc", "redis://***@127.0.0.1/abc"),
        ("redis://127.0.0.1/0?ttl=0", "ttl is the seconds"),
        ("sqlite://host/x.db", "no host"),
        ("sqlite:///", "no host"),
        ("", "a session store is"),
    ],
)
def test_open_session_store_refuses_anything_else_saying_what_is_accepted(
    url: str, said: str
) -> None:
    with pytest.raises(teamlead.UsageError) as caught:
        teamlead.open_session_store(url)
    assert said in str(caught.value) and "secret" not in str(caught.value)


# -- what a run does with a store ---------------------------------------------------------
def _transcript(path: Path, entries: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


async def test_a_session_is_brought_home_within_its_folder_with_its_sidecars(
    tmp_path: Path,
) -> None:
    from claude_agent_sdk import InMemorySessionStore

    from teamlead._sessions.home import bring_home
    from teamlead._sessions.stored import WarnOnce

    store = InMemorySessionStore()
    await store.append(KEY, [{"type": "user", "uuid": "u1"}])
    await store.append(SUB, [{"type": "agent_metadata", "agentType": "x"}])
    await store.append(SUB, [{"type": "assistant", "uuid": "s1"}])
    for bad in ("subagents/../../../escaped", "/etc/evil", "other/agent"):
        await store.append({**KEY, "subpath": bad}, [{"type": "user"}])
    brought = await bring_home(
        store, tmp_path / "projects", "proj", "sess", local=None, warn=WarnOnce()
    )
    assert brought.source == "store" and brought.files == 3
    folder = tmp_path / "projects" / "proj" / "sess"
    written = [p for p in (tmp_path / "projects").glob("**/*") if p.is_file()]  # noqa: ASYNC240
    assert sorted(str(p.relative_to(tmp_path)) for p in written) == [
        "projects/proj/sess.jsonl",
        "projects/proj/sess/subagents/agent-1.jsonl",
        "projects/proj/sess/subagents/agent-1.meta.json",
    ]
    assert json.loads((folder / "subagents" / "agent-1.meta.json").read_text()) == {
        "agentType": "x"
    }


async def test_a_subkey_is_never_written_through_a_symlink_out_of_the_sessions_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from claude_agent_sdk import InMemorySessionStore

    from teamlead._sessions.home import bring_home
    from teamlead._sessions.stored import WarnOnce

    store = InMemorySessionStore()
    await store.append(KEY, [{"type": "user", "uuid": "u1"}])
    await store.append(SUB, [{"type": "assistant", "uuid": "s1"}])
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "projects" / "proj" / "sess"
    folder.mkdir(parents=True)
    (folder / "subagents").symlink_to(outside)  # placed by anyone who can write the config dir
    with caplog.at_level(logging.WARNING, logger="teamlead.sessions"):
        brought = await bring_home(
            store,
            tmp_path / "projects",
            "proj",
            "sess",
            local=None,
            warn=WarnOnce(logging.getLogger("teamlead.sessions")),
        )
    assert list(outside.iterdir()) == []  # noqa: ASYNC240
    assert brought.files == 1  # the main transcript only
    assert ["subagents/agent-1" in r.getMessage() for r in caplog.records] == [True]


async def test_the_local_transcript_wins_unless_the_store_is_further_along(
    tmp_path: Path,
) -> None:
    from claude_agent_sdk import InMemorySessionStore

    from teamlead._sessions.home import bring_home
    from teamlead._sessions.stored import WarnOnce

    store = InMemorySessionStore()
    await store.append(KEY, [{"type": "user", "uuid": "u1"}, {"type": "user", "uuid": "u2"}])
    local = tmp_path / "projects" / "proj" / "sess.jsonl"
    _transcript(local, [{"type": "user", "uuid": "u1"}, {"type": "user", "uuid": "u3"}])
    kept = await bring_home(
        store, tmp_path / "projects", "proj", "sess", local=local, warn=WarnOnce()
    )
    assert kept.source == "local" and "u3" in local.read_text()  # both have lines of their own
    _transcript(local, [{"type": "user", "uuid": "u1"}])
    ahead = await bring_home(
        store, tmp_path / "projects", "proj", "sess", local=local, warn=WarnOnce()
    )
    assert ahead.source == "store" and "u2" in local.read_text()  # another machine went on


async def test_a_journal_is_mirrored_once_line_by_line_across_runs(tmp_path: Path) -> None:
    from claude_agent_sdk import InMemorySessionStore

    from teamlead._sessions.journals import JournalMirror, journal_subpath

    store = InMemorySessionStore()
    journal = tmp_path / "projects" / "proj" / "sess" / "subagents" / "workflows" / "wf_1"
    journal = journal / "journal.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"type":"launched"}\n{"type":"result","agentId":"a"}\n{"type":"star')
    assert await JournalMirror(store, tmp_path).sync("sess", ["wf_1"]) == 2  # not the torn one
    with journal.open("a") as out:
        out.write('ted"}\nnot json\n{"type":"result","agentId":"b"}\n')
    again = JournalMirror(store, tmp_path)  # a later run: it goes on after what is stored
    assert await again.sync("sess", ["wf_1"]) == 2
    assert await again.sync("sess", ["wf_1"]) == 0
    key: SessionKey = {**KEY, "subpath": journal_subpath("wf_1")}
    assert [e["type"] for e in await store.load(key) or []] == [
        "launched",
        "result",
        "started",
        "result",
    ]


async def test_the_runs_view_reads_local_first_and_a_failing_store_costs_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from claude_agent_sdk import InMemorySessionStore

    from teamlead._sessions.run_store import RunStore

    class Broken(InMemorySessionStore):
        async def append(self, key: SessionKey, entries: list[Any]) -> None:
            raise ConnectionError("the store went away")

    healthy = InMemorySessionStore()
    await healthy.append(KEY, [{"type": "user"}])
    run = RunStore(healthy, config_dir=tmp_path, cwd=tmp_path)
    assert await run.view.load(KEY) == [{"type": "user"}]
    _transcript(tmp_path / "projects" / "p" / "sess.jsonl", [{"type": "user"}])
    assert await run.view.load(KEY) is None  # the CLI resumes the local files
    assert await run.view.load(SUB) is None and await run.view.list_subkeys(KEY) == []

    broken = RunStore(Broken(), config_dir=tmp_path, cwd=tmp_path)
    with caplog.at_level(logging.WARNING, logger="teamlead.sessions"):
        for _ in range(3):
            await broken.view.append(KEY, [{"type": "user"}])  # never raises into the SDK
        assert await broken.view.load({**KEY, "session_id": "other"}) is None
    assert len(caplog.records) == 1 and "the store went away" in caplog.records[0].getMessage()
    assert broken.failed is not None


async def _sessions_of(path: Path, ids: list[str], opened: list[Any]) -> None:
    """An SQLite store at ``path`` holding one session of each of ``ids``."""
    store = SQLiteSessionStore(path)
    opened.append(store)
    for session_id in ids:
        await store.append({"project_key": "p", "session_id": session_id}, [{"type": "user"}])
    await store.aclose()


async def _listed(path: Path) -> list[str]:
    """The lines ``teamlead sessions`` prints for the SQLite store at ``path``."""
    args = ["sessions", "--session-store", f"sqlite://{path}"]
    result = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(main, args))
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


async def test_the_sessions_table_escapes_control_characters_and_stays_aligned(
    tmp_path: Path, opened: list[Any]
) -> None:
    path = tmp_path / "s.db"
    await _sessions_of(path, ["plain-session", "evil\x1b[2J\x07\u202eid", "tab\there"], opened)
    lines = await _listed(path)
    output = "\n".join(lines)
    assert len(lines) == 3 and "\x1b" not in output and "\u202e" not in output
    shown = {line.split(" ", 1)[0] for line in lines}
    assert shown == {"plain-session", "evil\\x1b[2J\\x07\\u202eid", "tab\\x09here"}
    # the time column starts at the same place on every row
    assert len({line.index(" 20") for line in lines}) == 1, lines


async def test_a_session_written_at_no_calendar_time_is_listed_with_no_time(
    tmp_path: Path, opened: list[Any]
) -> None:
    path = tmp_path / "s.db"
    await _sessions_of(path, ["far", "before", "plain"], opened)
    with sqlite3.connect(path) as db:  # the largest and the smallest INTEGER SQLite keeps
        db.execute(
            "UPDATE teamlead_session_keys SET mtime = ? WHERE session_id = 'far'", (2**63 - 1,)
        )
        db.execute(
            "UPDATE teamlead_session_keys SET mtime = ? WHERE session_id = 'before'", (-(2**63),)
        )
    rows = {line.split()[0]: line.split()[1] for line in await _listed(path)}
    assert rows["far"] == rows["before"] == "-"
    assert rows["plain"].startswith("20")


async def test_an_append_after_a_last_write_at_the_largest_time_still_lands(
    tmp_path: Path, opened: list[Any]
) -> None:
    path = tmp_path / "s.db"
    store = SQLiteSessionStore(path)
    opened.append(store)
    await store.append(KEY, [{"type": "user", "uuid": "a"}])
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE teamlead_session_keys SET mtime = ?", (2**63 - 1,))
    await store.append(KEY, [{"type": "user", "uuid": "b"}])
    assert await store.load(KEY) == [{"type": "user", "uuid": "a"}, {"type": "user", "uuid": "b"}]


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
async def test_an_entry_holding_a_lone_surrogate_is_stored_and_read_back_as_it_was(
    kind: str, tmp_path: Path, opened: list[Any], request: pytest.FixtureRequest
) -> None:
    # JSON.stringify writes half a surrogate pair as an escape; Python reads it back as a
    # code point no UTF-8 text holds (a prompt's goes into the session's summary too)
    if kind == "redis":
        store: Any = _redis_store(request.getfixturevalue("redis"), opened)
    else:
        store = SQLiteSessionStore(tmp_path / "s.db")
        opened.append(store)
    entries: Any = [
        {"type": "user", "uuid": "a", "message": {"role": "user", "content": "cut \ud83d"}},
        {"type": "custom-title", "customTitle": "title \udfff"},
    ]
    await store.append(KEY, entries)
    assert await store.load(KEY) == entries
    [summary] = await store.list_session_summaries("proj")
    data = summary["data"]
    assert (data["first_prompt"], data["custom_title"]) == ("cut \ud83d", "title \udfff")
