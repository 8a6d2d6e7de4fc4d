"""Errors map to kvpool.Error subclasses carrying the ErrorCode and the C++ message."""

import pytest

import kvpool

CODES = {
    "NotEnoughBlocks": 1, "InvalidArgument": 2, "InvalidState": 3, "BlockFull": 4,
    "BlockEmpty": 5, "IncompleteBlock": 6, "InvalidHandle": 7, "NotFound": 8,
    "ResourceExhausted": 9, "DaemonGone": 10, "ProtocolError": 11, "VersionMismatch": 12,
    "ConfigError": 13, "PermissionDenied": 14, "IoError": 15, "Timeout": 16, "Unsupported": 17,
    "DeviceError": 18, "Disconnected": 19, "Internal": 20, "QuotaExceeded": 21,
    "DaemonUnresponsive": 22, "ChecksumMismatch": 23,
}


def test_hierarchy_and_stable_codes():
    for name, number in CODES.items():
        cls = getattr(kvpool, name)
        assert issubclass(cls, kvpool.Error) and issubclass(cls, Exception)
        assert cls.code == number and cls.code is kvpool.ErrorCode[name]
        assert cls.__module__ == "kvpool" and cls.__doc__
    assert int(kvpool.ErrorCode.Ok) == 0


def test_not_enough_blocks(daemon):
    pool = daemon.connect().pool("g")
    held = pool.allocate_blocks(60)
    with pytest.raises(kvpool.NotEnoughBlocks) as e:
        pool.allocate_blocks(10)
    assert e.value.code == kvpool.ErrorCode.NotEnoughBlocks == 1
    assert "10" in str(e.value) and str(e.value) == e.value.message
    assert len(held) == 60


def test_block_state_errors(daemon):
    pool = daemon.connect().pool("g")
    (b,) = pool.allocate_blocks(1)
    with pytest.raises(kvpool.InvalidState) as e:
        b.add_token(1)  # Reset: init_sequence first
    assert e.value.code == kvpool.ErrorCode.InvalidState and "Reset" in e.value.message
    b.init_sequence(0)
    with pytest.raises(kvpool.BlockEmpty):
        b.pop_token()
    b.add_tokens([1, 2, 3])
    with pytest.raises(kvpool.IncompleteBlock) as e:
        b.commit()
    assert e.value.code == 6
    assert b.add_tokens([4, 5, 6]) == 1  # only one fits
    with pytest.raises(kvpool.BlockFull):
        b.add_token(7)
    with pytest.raises(kvpool.InvalidState):
        b.sequence_hash  # not committed yet
    b.commit()
    assert b.state == "Complete"


def test_unknown_pool_and_daemon(daemon):
    client = daemon.connect()
    with pytest.raises(kvpool.NotFound) as e:
        client.pool("nope")
    assert e.value.code == kvpool.ErrorCode.NotFound and "nope" in str(e.value)
    with pytest.raises(kvpool.NotFound):
        kvpool.Client.connect("no-such-instance", runtime_dir=daemon.runtime_dir, connect_timeout=1)


def test_foreign_block_is_an_invalid_argument_or_handle(daemon_factory):
    from conftest import host_pool
    d = daemon_factory(pools=[host_pool("g"), host_pool("h")])
    client = d.connect()
    g, h = client.pool("g"), client.pool("h")
    (b,) = g.allocate_blocks(1)
    b.init_sequence(0)
    b.add_tokens([1, 2, 3, 4])
    b.commit()
    with pytest.raises(kvpool.Error) as e:
        h.register_blocks([b])
    assert e.value.code in (kvpool.ErrorCode.InvalidArgument, kvpool.ErrorCode.InvalidHandle)


def test_daemon_gone(daemon):
    client = daemon.connect(reattach=False)
    pool = client.pool("g")
    client.ping()
    daemon.kill()
    with pytest.raises(kvpool.DaemonGone) as e:
        for _ in range(1000):  # the first calls may race the hang-up
            pool.allocate_blocks(1)
    assert e.value.code == kvpool.ErrorCode.DaemonGone == 10
    assert not client.daemon_alive
