#!/usr/bin/env python3
"""Reads a `cell record` MCAP file with PyPI's `mcap` (independent of the cell's code).

Checks, and prints one JSON object with the figures:
  - every channel has a schema; JSON channels' schemas are JSON Schemas (encoding
    `jsonschema`), and their messages parse as JSON and validate against them (up to
    --validate-per-channel messages a channel, spread over the file);
  - every `raw/<key>` channel has a JSON twin with as many messages;
  - truncated at --cuts random bytes (seeded), the file still yields every message of the
    chunks that ended before the cut (the library's linear StreamReader, as a recovery of a
    killed recording reads it).

Usage: check_mcap.py FILE [--cuts N] [--seed S] [--validate-per-channel K]
Exit 0 when every check holds; the failures are listed otherwise.
"""

import argparse
import io
import json
import random
import sys

import jsonschema
from mcap.reader import make_reader
from mcap.stream_reader import StreamReader
from mcap.exceptions import EndOfFile
from mcap.records import Chunk, Message

try:
    import zstandard
except ImportError:  # mcap depends on it; keep the message clear if not
    zstandard = None


def chunk_ends_and_counts(data: bytes):
    """(end offset, message count) of every chunk, in file order."""
    out = []
    stream = io.BytesIO(data)
    reader = StreamReader(stream, skip_magic=False, emit_chunks=True)
    for rec in reader.records:
        if isinstance(rec, Chunk):
            end = stream.tell()
            if rec.compression == "zstd":
                raw = zstandard.ZstdDecompressor().decompress(
                    rec.data, max_output_size=rec.uncompressed_size
                )
            elif rec.compression == "":
                raw = rec.data
            else:
                raise RuntimeError(f"unexpected chunk compression {rec.compression!r}")
            n = 0
            try:
                for r in StreamReader(io.BytesIO(raw), skip_magic=True).records:
                    n += isinstance(r, Message)
            except EndOfFile:  # the chunk's records end with its data
                pass
            out.append((end, n))
    return out


def linear_count(data: bytes):
    """Messages a linear reader gets from (possibly truncated) bytes before it stops."""
    n = 0
    try:
        for r in StreamReader(io.BytesIO(data), skip_magic=False).records:
            n += isinstance(r, Message)
    except Exception:  # noqa: BLE001 — the truncated record: everything before it was read
        pass
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--cuts", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--validate-per-channel", type=int, default=200)
    a = ap.parse_args()
    data = open(a.file, "rb").read()
    problems = []
    reader = make_reader(io.BytesIO(data))
    summary = reader.get_summary()
    header = reader.get_header()
    channels = summary.channels
    schemas = summary.schemas
    counts = summary.statistics.channel_message_counts
    by_topic = {c.topic: c for c in channels.values()}
    for cid, c in channels.items():
        if c.schema_id == 0 or c.schema_id not in schemas:
            problems.append(f"channel {c.topic} has no schema")
    json_channels = {cid: c for cid, c in channels.items() if c.message_encoding == "json"}
    raw_channels = {cid: c for cid, c in channels.items() if c.message_encoding == "postcard"}
    for cid, c in raw_channels.items():
        twin = by_topic.get("/" + c.topic[len("raw/"):])
        if twin is None:
            problems.append(f"{c.topic} has no JSON twin")
        elif counts.get(twin.id, 0) > counts.get(cid, 0):
            problems.append(f"{twin.topic}: more JSON than raw messages")
        if "wire_version" not in c.metadata:
            problems.append(f"{c.topic}: no wire_version in its metadata")
    validators = {}
    for cid, c in json_channels.items():
        s = schemas[c.schema_id]
        if s.encoding != "jsonschema":
            problems.append(f"{c.topic}: schema encoding {s.encoding!r}")
            continue
        schema = json.loads(s.data)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validators[cid] = cls(schema)
    # Validate a spread of messages a channel.
    stride = {cid: max(1, counts.get(cid, 0) // a.validate_per_channel) for cid in json_channels}
    seen = {cid: 0 for cid in json_channels}
    validated = 0
    invalid = 0
    first_invalid = []
    for schema, channel, message in reader.iter_messages():
        cid = channel.id
        if cid not in validators:
            continue
        i = seen[cid]
        seen[cid] += 1
        if i % stride[cid] != 0:
            continue
        try:
            v = json.loads(message.data)
            validators[cid].validate(v)
            validated += 1
        except Exception as e:  # noqa: BLE001 — reported below
            invalid += 1
            if len(first_invalid) < 5:
                first_invalid.append(f"{channel.topic}: {str(e)[:300]}")
    if invalid:
        problems.append(f"{invalid} messages failed validation: {first_invalid}")
    # Truncations.
    chunks = chunk_ends_and_counts(data)
    total = sum(n for _, n in chunks)
    rng = random.Random(a.seed)
    cuts = []
    for _ in range(a.cuts):
        cut = rng.randrange(0, len(data))
        expected = sum(n for end, n in chunks if end <= cut)
        got = linear_count(data[:cut])
        cuts.append({"cut_byte": cut, "expected_at_least": expected, "read": got})
        if got < expected:
            problems.append(f"cut at byte {cut}: read {got} messages, the complete chunks hold {expected}")
    out = {
        "profile": header.profile,
        "library": header.library,
        "channels": len(channels),
        "json_channels": len(json_channels),
        "raw_channels": len(raw_channels),
        "messages": sum(counts.values()),
        "chunks": len(chunks),
        # The longest log-time span of one chunk: what a killed recording can lose at most.
        "max_chunk_span_s": max(
            ((ci.message_end_time - ci.message_start_time) * 1e-9 for ci in summary.chunk_indexes),
            default=0.0,
        ),
        "messages_in_chunks": total,
        "validated": validated,
        "topics": {c.topic: counts.get(cid, 0) for cid, c in sorted(json_channels.items())},
        "metadata": [m.name for m in reader.iter_metadata()],
        "cuts": cuts,
        "problems": problems,
    }
    print(json.dumps(out))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
