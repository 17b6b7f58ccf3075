//! The drivers' codecs against the spec's test vectors (`protocols/vectors/sri.json` and
//! `ati.json`, written by `make_vectors.py` from the spec, independently of this crate and of
//! the simulator's emulators): each vector the host reads decodes to its fields; each one the host
//! writes is exactly what this crate writes.
#![allow(clippy::unwrap_used)]

use ft::{
    ati::{self, RdtCommand, RdtRecord, RdtRequest},
    sri::{self, Command, DataFormat, FrameData, FrameParser, Param, SriParams},
};
use serde_json::Value;

fn vectors(name: &str) -> Value {
    let path = format!("{}/../vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn hex(v: &Value) -> Vec<u8> {
    let s = v["hex"].as_str().unwrap();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn mode(v: &Value) -> DataFormat {
    DataFormat::from_letter(v.as_str().unwrap()).unwrap()
}

#[test]
fn sri_frames_decode_to_their_values_and_encode_to_their_bytes() {
    let all = vectors("sri.json");
    for v in all["frames"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v);
        let m = mode(&v["mode"]);
        let mut p = FrameParser::new(m);
        p.push(&bytes);
        let f = p.next_frame().unwrap_or_else(|| panic!("{name}: no frame"));
        assert!(p.next_frame().is_none(), "{name}");
        assert_eq!(
            f.package_no as u64,
            v["package_no"].as_u64().unwrap(),
            "{name}"
        );
        match f.data {
            FrameData::Calibrated(x) => {
                let want = f64s(&v["values"]);
                for (a, b) in x.iter().zip(&want) {
                    assert_eq!(*a, *b as f32, "{name}");
                }
            }
            FrameData::Raw(c) => {
                let want: Vec<u16> = f64s(&v["counts"]).iter().map(|x| *x as u16).collect();
                assert_eq!(c.to_vec(), want, "{name}");
            }
        }
        assert_eq!(sri::encode_frame(&f), bytes, "{name}: re-encoded");
    }
}

#[test]
fn sri_commands_are_what_the_host_writes() {
    let all = vectors("sri.json");
    for v in all["commands"].as_array().unwrap() {
        let line = v["line"].as_str().unwrap();
        let cmd = match v["command"].as_str().unwrap() {
            "SMPR" => Command::SetSampleRate(v["value"].as_u64().unwrap() as u32),
            "SGDM" => Command::SetFormat(mode(&v["mode"])),
            "DCKMD" => Command::SetCheckModeSum,
            "GSD" => Command::StartStream,
            "GSD=STOP" => Command::StopStream,
            "GOD" => Command::GetOne,
            "query" => Command::Query(Param::from_name(v["param"].as_str().unwrap()).unwrap()),
            other => panic!("vector command {other}"),
        };
        assert_eq!(cmd.encode(), line);
        assert_eq!(Command::parse(line).unwrap(), cmd, "{line:?}");
    }
}

#[test]
fn sri_replies_read_as_their_values() {
    let all = vectors("sri.json");
    for v in all["acks"].as_array().unwrap() {
        let line = v["line"].as_str().unwrap();
        let ack = sri::parse_ack(line).unwrap();
        assert_eq!(ack.name, v["name"].as_str().unwrap(), "{line:?}");
        let value = ack.ok_value().unwrap();
        if let Some(x) = v.get("value") {
            assert_eq!(value, x.as_str().unwrap());
        }
        if let Some(x) = v.get("six") {
            assert_eq!(sri::parse_six(value).unwrap().to_vec(), f64s(x), "{line:?}");
        }
        if let Some(x) = v.get("mode") {
            assert_eq!(sri::parse_format(value).unwrap(), mode(x), "{line:?}");
        }
        if let Some(x) = v.get("matrix") {
            let m = sri::parse_matrix(value).unwrap();
            for (row, want) in m.iter().zip(x.as_array().unwrap()) {
                assert_eq!(row.to_vec(), f64s(want), "{line:?}");
            }
        }
    }
}

#[test]
fn sri_counts_convert_as_the_spec_says() {
    let all = vectors("sri.json");
    let c = &all["conversion"];
    let six = |k: &str| -> [f64; 6] { f64s(&c[k]).try_into().unwrap() };
    let mut ident = [[0.0; 6]; 6];
    for (i, row) in ident.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    let p = SriParams {
        amp_zero: six("amp_zero"),
        gain: six("gain"),
        excitation_v: six("excitation_v"),
        decoupling: ident,
    };
    let counts: [u16; 6] = f64s(&c["counts"])
        .iter()
        .map(|x| *x as u16)
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    let got = p.counts_to_mvv(&counts);
    for (g, w) in got.iter().zip(six("mvv")) {
        assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{got:?}");
    }
}

#[test]
fn ati_requests_are_what_the_host_writes() {
    let all = vectors("ati.json");
    for v in all["requests"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let r = RdtRequest::new(
            RdtCommand::from_code(v["command"].as_u64().unwrap() as u16),
            v["sample_count"].as_u64().unwrap() as u32,
        );
        assert_eq!(r.encode().to_vec(), hex(v), "{name}");
        assert_eq!(RdtRequest::decode(&hex(v)).unwrap(), r, "{name}");
    }
}

#[test]
fn ati_records_decode_to_their_fields() {
    let all = vectors("ati.json");
    let recs = all["records"].as_array().unwrap();
    for v in recs {
        let name = v["name"].as_str().unwrap();
        let b: [u8; ati::RECORD_LEN] = hex(v).try_into().unwrap();
        let r = RdtRecord::decode(&b);
        assert_eq!(
            r.rdt_sequence as u64,
            v["rdt_sequence"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            r.ft_sequence as u64,
            v["ft_sequence"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(r.status as u64, v["status"].as_u64().unwrap(), "{name}");
        let want: Vec<i32> = v["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap() as i32)
            .collect();
        assert_eq!(r.counts.to_vec(), want, "{name}");
        assert_eq!(r.encode(), b, "{name}: re-encoded");
    }
    let both = ati::decode_datagram(&hex(&all["buffered"])).unwrap();
    assert_eq!(both.len(), 2);
    let s = &all["scaling"];
    let r = RdtRecord {
        counts: f64s(&s["counts"])
            .iter()
            .map(|x| *x as i32)
            .collect::<Vec<_>>()
            .try_into()
            .unwrap(),
        ..RdtRecord::default()
    };
    let w = r.wrench(s["cfgcpf"].as_f64().unwrap(), s["cfgcpt"].as_f64().unwrap());
    for (g, want) in w.iter().zip(f64s(&s["wrench"])) {
        assert!((g - want).abs() <= 1e-12, "{w:?}");
    }
    let xml = ati::parse_netftapi2(all["netftapi2_xml"].as_str().unwrap()).unwrap();
    let n = &all["netftapi2"];
    assert_eq!(xml.counts_per_force, n["cfgcpf"].as_f64().unwrap());
    assert_eq!(xml.counts_per_torque, n["cfgcpt"].as_f64().unwrap());
    assert_eq!(xml.force_unit.as_deref(), n["scfgfu"].as_str());
    assert_eq!(xml.torque_unit.as_deref(), n["scfgtu"].as_str());
    assert_eq!(xml.rdt_rate_hz, n["comrdtrate"].as_f64());
}
