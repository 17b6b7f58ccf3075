#!/usr/bin/env python3
"""Writes the wire test vectors in this folder from the specs (shared/reference/protocols.md).

A third, independent writer of each protocol: the drivers (`protocols/egm`, `protocols/ft`) and
the simulator's emulators (`services/sim/src/wire/`) are each held to these files, so a misread
spec cannot hide by being the same on both sides. Field numbers, byte orders and scales are
written out below from the spec tables, not taken from either Rust side. The SRI `E` frame is
the captured frame quoted in the spec (§3.4, [S65]).

    python3 protocols/vectors/make_vectors.py          # rewrite egm.json, sri.json, ati.json
    python3 protocols/vectors/make_vectors.py --check  # fail if the files differ (CI)
"""
import json
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# --- protobuf (proto2) wire format: key = field << 3 | wire type ------------------------------
VARINT, FIXED64, LEN = 0, 1, 2


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def key(field, wt):
    return varint(field << 3 | wt)


def f_varint(field, v):
    return key(field, VARINT) + varint(v)


def f_double(field, v):
    return key(field, FIXED64) + struct.pack("<d", v)


def f_msg(field, body):
    return key(field, LEN) + varint(len(body)) + body


def unpacked_doubles(field, vs):
    # proto2 repeated scalars are not packed by default: one key per value.
    return b"".join(f_double(field, v) for v in vs)


def packed_doubles(field, vs):
    body = b"".join(struct.pack("<d", v) for v in vs)
    return f_msg(field, body)


# abb.egm field numbers (§1.4).
def egm_header(seqno, tm, mtype):
    return f_varint(1, seqno) + f_varint(2, tm) + f_varint(3, mtype)


def egm_joints(vs, packed=False):
    return packed_doubles(1, vs) if packed else unpacked_doubles(1, vs)


def egm_pose(pos, quat):
    cart = f_double(1, pos[0]) + f_double(2, pos[1]) + f_double(3, pos[2])
    q = b"".join(f_double(i + 1, quat[i]) for i in range(4))
    return f_msg(1, cart) + f_msg(2, q)


MSGTYPE_DATA, MSGTYPE_CORRECTION = 2, 3
MOTORS_ON, MOTORS_OFF = 1, 2
MCI_STOPPED, MCI_RUNNING = 2, 3
RAPID_STOPPED, RAPID_RUNNING = 1, 2


def egm_robot(v):
    out = f_msg(1, egm_header(v["seqno"], v["tm_ms"], v["mtype"]))
    fb = f_msg(1, egm_joints(v["feedback_joints_deg"]))
    if v["feedback_pos_mm"] is not None:
        fb += f_msg(2, egm_pose(v["feedback_pos_mm"], v["feedback_quat_wxyz"]))
    if v.get("feedback_time_us") is not None:
        # EgmFeedBack 4 `time` EgmClock (V1.1, RW >= 6.07): 1 sec, 2 usec since 1970.
        sec, usec = divmod(v["feedback_time_us"], 1_000_000)
        fb += f_msg(4, f_varint(1, sec) + f_varint(2, usec))
    out += f_msg(2, fb)
    out += f_msg(3, f_msg(1, egm_joints(v["planned_joints_deg"])))
    out += f_msg(4, f_varint(1, v["motor_state"]))
    out += f_msg(5, f_varint(1, v["mci_state"]))
    out += f_varint(6, 1 if v["mci_convergence_met"] else 0)
    out += f_msg(8, f_varint(1, v["rapid_exec_state"]))
    return out


def egm_sensor(v, packed=False):
    out = f_msg(1, egm_header(v["seqno"], v["tm_ms"], v["mtype"]))
    out += f_msg(2, f_msg(1, egm_joints(v["planned_joints_deg"], packed)))
    if v.get("speed_joints_deg_s") is not None:
        out += f_msg(3, f_msg(1, egm_joints(v["speed_joints_deg_s"], packed)))
    return out


def egm():
    robot = [
        {
            "name": "a running session's cycle with the flange pose",
            "seqno": 1,
            "tm_ms": 4,
            "mtype": MSGTYPE_DATA,
            "feedback_joints_deg": [0.0, -10.5, 20.25, 0.125, 45.0, -90.0],
            "feedback_pos_mm": [374.0, 0.0, 630.0],
            "feedback_quat_wxyz": [0.5, 0.5, -0.5, 0.5],
            "planned_joints_deg": [0.25, -10.0, 20.0, 0.0, 45.5, -89.75],
            "motor_state": MOTORS_ON,
            "mci_state": MCI_RUNNING,
            "mci_convergence_met": True,
            "rapid_exec_state": RAPID_RUNNING,
        },
        {
            "name": "motors off, no session, the sequence number at its wrap, no Cartesian feedback",
            "seqno": 4294967295,
            "tm_ms": 300000,
            "mtype": MSGTYPE_DATA,
            "feedback_joints_deg": [-165.0, 110.0, -110.0, 160.0, -120.0, 400.0],
            "feedback_pos_mm": None,
            "feedback_quat_wxyz": None,
            "planned_joints_deg": [-165.0, 110.0, -110.0, 160.0, -120.0, 400.0],
            "motor_state": MOTORS_OFF,
            "mci_state": MCI_STOPPED,
            "mci_convergence_met": False,
            "rapid_exec_state": RAPID_STOPPED,
        },
        {
            "name": "a restarted session's first cycle: sequence number 0, feedBack.time (V1.1)",
            "seqno": 0,
            "tm_ms": 1236,
            "mtype": MSGTYPE_DATA,
            "feedback_joints_deg": [0.0, 0.0, 0.0, 0.0, 30.0, 0.0],
            "feedback_pos_mm": [374.0, 0.0, 630.0],
            "feedback_quat_wxyz": [0.5, 0.5, -0.5, 0.5],
            "feedback_time_us": 1796601601236000,
            "planned_joints_deg": [0.0, 0.0, 0.0, 0.0, 30.0, 0.0],
            "motor_state": MOTORS_ON,
            "mci_state": MCI_RUNNING,
            "mci_convergence_met": True,
            "rapid_exec_state": RAPID_RUNNING,
        },
    ]
    for v in robot:
        v["hex"] = egm_robot(v).hex()
    sensor = [
        {
            "name": "a joint reference",
            "seqno": 7,
            "tm_ms": 28,
            "mtype": MSGTYPE_CORRECTION,
            "planned_joints_deg": [1.0, -2.5, 30.0, 0.0, -45.0, 180.0],
            "speed_joints_deg_s": None,
        },
        {
            "name": "a joint reference with a speed reference",
            "seqno": 300,
            "tm_ms": 1200,
            "mtype": MSGTYPE_CORRECTION,
            "planned_joints_deg": [0.0, 0.0, 0.0, 0.0, 90.0, 0.0],
            "speed_joints_deg_s": [0.5, -0.25, 0.0, 0.0, 1.0, -2.0],
        },
    ]
    for v in sensor:
        v["hex"] = egm_sensor(v).hex()
    # Both encodings of repeated doubles must be read alike (§1.3): a decoder-only case.
    packed = dict(sensor[0], name="the joint reference with packed joints (read, not written)")
    packed["hex"] = egm_sensor(packed, packed=True).hex()
    packed["decode_only"] = True
    sensor.append(packed)
    return {
        "spec": "shared/reference/protocols.md §1.3-1.4 (abb.egm, proto2)",
        "robot": robot,
        "sensor": sensor,
        "sensor_malformed": [
            {"name": "truncated inside the planned joints", "hex": egm_sensor(sensor[0])[:-3].hex()},
            {"name": "a length past the end", "hex": (f_msg(1, egm_header(1, 1, 3))[:1] + varint(100)).hex()},
        ],
    }


# --- SRI M812x (§3) ----------------------------------------------------------------------------
def sri_frame(package_no, data):
    # AA 55 | PackageLength u16 BE (bytes after it) | PackageNo u16 BE | data | sum of data mod 256
    body = struct.pack(">H", package_no) + data + bytes([sum(data) & 0xFF])
    return b"\xAA\x55" + struct.pack(">H", len(body)) + body


def sri():
    captured = bytes.fromhex(
        "AA55001B0001" "41A3A43ECAD1B43F360612BE6A6F833B240256BB00EA3C37" "8B"
    )
    e_values = list(struct.unpack("<6f", captured[6:30]))
    counts = [32768, 33768, 31768, 32769, 32767, 65535]
    c_frame = sri_frame(0x1234, struct.pack(">6H", *counts))
    e2 = [12.5, -3.25, 100.0, 0.5, -0.125, 0.0625]
    e_frame2 = sri_frame(0xFFFF, struct.pack("<6f", *e2))
    return {
        "spec": "shared/reference/protocols.md §3 (SRI M812x)",
        "frames": [
            {"name": "the captured E frame of [S65]", "mode": "E", "package_no": 1, "values": e_values, "hex": captured.hex()},
            {"name": "an E frame at the package number's wrap", "mode": "E", "package_no": 0xFFFF, "values": e2, "hex": e_frame2.hex()},
            {"name": "a C frame (raw counts, big-endian)", "mode": "C", "package_no": 0x1234, "counts": counts, "hex": c_frame.hex()},
        ],
        # host -> box
        "commands": [
            {"line": "AT+SMPR=1000\r\n", "command": "SMPR", "value": 1000},
            {"line": "AT+SGDM=(A01,A02,A03,A04,A05,A06);E;1;(WMA:1)\r\n", "command": "SGDM", "mode": "E"},
            {"line": "AT+SGDM=(A01,A02,A03,A04,A05,A06);C;1;(WMA:1)\r\n", "command": "SGDM", "mode": "C"},
            {"line": "AT+DCKMD=SUM\r\n", "command": "DCKMD"},
            {"line": "AT+GSD\r\n", "command": "GSD"},
            {"line": "AT+GSD=STOP\r\n", "command": "GSD=STOP"},
            {"line": "AT+GOD\r\n", "command": "GOD"},
            {"line": "AT+AMPZ=?\r\n", "command": "query", "param": "AMPZ"},
            {"line": "AT+DCPM=?\r\n", "command": "query", "param": "DCPM"},
        ],
        # box -> host
        "acks": [
            {"line": "ACK+SMPR=1000$OK\r\n", "name": "SMPR", "value": "1000"},
            {"line": "ACK+ETPT=4008$OK\r\n", "name": "ETPT", "value": "4008"},
            {"line": "ACK+AMPZ=32768;32790;32745;32770;32760;32781$OK\r\n", "name": "AMPZ",
             "six": [32768.0, 32790.0, 32745.0, 32770.0, 32760.0, 32781.0]},
            {"line": "ACK+CHNAPG=124;124.5;123.8;124.2;123.9;124.1$OK\r\n", "name": "CHNAPG",
             "six": [124.0, 124.5, 123.8, 124.2, 123.9, 124.1]},
            {"line": "ACK+SGDM=(A01,A02,A03,A04,A05,A06);C;1;(WMA:1.000000)$OK\r\n", "name": "SGDM", "mode": "C"},
            {"line": "ACK+DCPM=(248,3.1,-2.2,1.5,-0.8,0.6);(-2.7,252,1.9,-0.7,1.1,-0.5);(1.4,-1.8,610,2.3,-2.9,1.2);"
                     "(0.02,-0.05,0.03,6.1,0.04,-0.02);(-0.04,0.03,-0.02,0.05,6,0.03);(0.01,0.02,-0.03,-0.01,0.02,7.9)$OK\r\n",
             "name": "DCPM",
             "matrix": [[248, 3.1, -2.2, 1.5, -0.8, 0.6], [-2.7, 252, 1.9, -0.7, 1.1, -0.5], [1.4, -1.8, 610, 2.3, -2.9, 1.2],
                        [0.02, -0.05, 0.03, 6.1, 0.04, -0.02], [-0.04, 0.03, -0.02, 0.05, 6, 0.03], [0.01, 0.02, -0.03, -0.01, 0.02, 7.9]]},
        ],
        # C-mode conversion (§3.5): DAT = 1000·((RAW − AmpZero)/65535·5)/Gain/EXC
        "conversion": {
            "amp_zero": [32768.0] * 6, "gain": [124.0] * 6, "excitation_v": [5.0] * 6,
            "counts": [33768, 31768, 32768, 65535, 0, 32769],
            "mvv": [1000.0 * ((c - 32768.0) / 65535.0 * 5.0) / 124.0 / 5.0 for c in [33768, 31768, 32768, 65535, 0, 32769]],
        },
    }


# --- ATI Net F/T RDT (§2), all big-endian --------------------------------------------------------
def ati():
    def req(cmd, count):
        return struct.pack(">HHI", 0x1234, cmd, count).hex()

    def rec(r):
        return struct.pack(">III6i", r["rdt_sequence"], r["ft_sequence"], r["status"], *r["counts"]).hex()

    records = [
        {"name": "a loaded sample", "rdt_sequence": 1, "ft_sequence": 1000, "status": 0,
         "counts": [1500000, -2500000, 30000000, 125000, -64000, 1]},
        {"name": "sequences at their wrap, latched monitor status", "rdt_sequence": 4294967295,
         "ft_sequence": 4294967294, "status": 0x80010000, "counts": [-1, 0, -2147483648, 2147483647, 7, -7]},
    ]
    for r in records:
        r["hex"] = rec(r)
    return {
        "spec": "shared/reference/protocols.md §2 (ATI Net F/T RDT)",
        "requests": [
            {"name": "start real-time streaming, until stopped", "command": 0x0002, "sample_count": 0, "hex": req(2, 0)},
            {"name": "start real-time streaming, 1000 samples", "command": 0x0002, "sample_count": 1000, "hex": req(2, 1000)},
            {"name": "start buffered streaming", "command": 0x0003, "sample_count": 0, "hex": req(3, 0)},
            {"name": "stop", "command": 0x0000, "sample_count": 0, "hex": req(0, 0)},
            {"name": "set software bias", "command": 0x0042, "sample_count": 0, "hex": req(0x42, 0)},
            {"name": "a count above 16 bits", "command": 0x0002, "sample_count": 0x01020304, "hex": req(2, 0x01020304)},
        ],
        "records": records,
        "buffered": {"name": "two records in one datagram", "hex": rec(records[0]) + rec(records[1])},
        # counts -> units: force = counts / cfgcpf, torque = counts / cfgcpt (§2.4)
        "scaling": {"cfgcpf": 1000000, "cfgcpt": 1000000, "scfgfu": "N", "scfgtu": "Nm",
                    "counts": [1500000, -2500000, 30000000, 125000, -64000, 1],
                    "wrench": [1.5, -2.5, 30.0, 0.125, -0.064, 1e-6]},
        # GET /netftapi2.xml (§2.4): the elements the host reads.
        "netftapi2_xml": "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<netft>\n<prodname>Net F/T</prodname>\n"
                         "<cfgcpf>1000000</cfgcpf>\n<cfgcpt>1000000</cfgcpt>\n<scfgfu>N</scfgfu>\n"
                         "<scfgtu>Nm</scfgtu>\n<comrdtrate>1000</comrdtrate>\n</netft>\n",
        "netftapi2": {"cfgcpf": 1000000, "cfgcpt": 1000000, "scfgfu": "N", "scfgtu": "Nm", "comrdtrate": 1000},
    }


def main():
    files = {"egm.json": egm(), "sri.json": sri(), "ati.json": ati()}
    check = "--check" in sys.argv
    bad = []
    for name, data in files.items():
        text = json.dumps(data, indent=1) + "\n"
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                bad.append(name)
        else:
            path.write_text(text)
    if bad:
        print("test vectors out of date (run protocols/vectors/make_vectors.py):", ", ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
