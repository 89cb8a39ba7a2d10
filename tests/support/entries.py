"""Damage done to a remembered path's entry (einc.planner.pathcache), as the tests of
every search that remembers paths on disk do it: each kind must be ignored by the reader."""

import json

KINDS = ("garbage", "not utf-8", "other version", "foreign key", "bad path", "short path", "bad report", "link",
         "nested")


def damage(entry, kind: str, old_version: str) -> dict:
    """Damage ``entry`` (a path) as ``kind`` says (``old_version``: another search's version
    string); return the record it held."""
    record = json.loads(entry.read_text())
    if kind == "garbage":
        entry.write_text("{not json")
    elif kind == "not utf-8":
        entry.write_bytes(b"\xff\xfe" * 10)
    elif kind == "other version":
        entry.write_text(json.dumps(dict(record, version=old_version)))
    elif kind == "foreign key":
        entry.write_text(json.dumps(dict(record, key="0" * 64)))
    elif kind == "bad path":
        entry.write_text(json.dumps(dict(record, path=[[0, 0]] + record["path"][1:])))
    elif kind == "short path":
        entry.write_text(json.dumps(dict(record, path=record["path"][:-1])))
    elif kind == "bad report":
        entry.write_text(json.dumps(dict(record, report=dict(record["report"], trials="many"))))
    elif kind == "nested":            # arrays nested past Python's stack: json raised RecursionError
        entry.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "link":
        target = entry.with_name("elsewhere.txt")
        entry.rename(target)
        entry.symlink_to(target)
    else:
        raise ValueError(kind)
    return record
