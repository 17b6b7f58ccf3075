//! Finds every non-finite float in a value, through its `Serialize` impl: a serializer that
//! writes nothing and records the path of each NaN or infinity (`reference[2].Ramp.to`).
//! The targets use it to hold decoders to "nothing non-finite gets through".

use std::fmt;

use serde::ser::{self, Serialize};

/// The paths of the non-finite floats of `value` (empty when every float is finite).
pub fn non_finite<T: Serialize + ?Sized>(value: &T) -> Vec<String> {
    let mut s = Scanner::default();
    // The scanner itself never fails; a `Serialize` impl that does is a finding of its own.
    if let Err(e) = value.serialize(&mut s) {
        s.found.push(format!("<serialize failed: {e}>"));
    }
    s.found
}

#[derive(Default)]
struct Scanner {
    path: Vec<String>,
    found: Vec<String>,
}

impl Scanner {
    fn float(&mut self, v: f64) {
        if !v.is_finite() {
            let mut at = String::new();
            for seg in &self.path {
                if !at.is_empty() && !seg.starts_with('[') {
                    at.push('.');
                }
                at.push_str(seg);
            }
            self.found.push(format!("{at} = {v}"));
        }
    }
    fn nested<T: Serialize + ?Sized>(&mut self, name: String, v: &T) -> Result<(), Error> {
        self.path.push(name);
        let r = v.serialize(&mut *self);
        self.path.pop();
        r
    }
}

#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// A sequence, tuple or map being walked: counts its elements for the path.
struct Compound<'a> {
    s: &'a mut Scanner,
    index: usize,
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        let name = format!("[{}]", self.index);
        self.index += 1;
        self.s.nested(name, v)
    }
}

impl<'a> ser::Serializer for &'a mut Scanner {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, _: bool) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(f64::from(v));
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(v);
        Ok(())
    }
    fn serialize_char(self, _: char) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.nested(variant.to_string(), v)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(Compound { s: self, index: 0 })
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Error> {
        Ok(Compound { s: self, index: 0 })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Error> {
        Ok(Compound { s: self, index: 0 })
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        self.path.push(variant.to_string());
        Ok(Compound { s: self, index: 0 })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(Compound { s: self, index: 0 })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Error> {
        Ok(Compound { s: self, index: 0 })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        self.path.push(variant.to_string());
        Ok(Compound { s: self, index: 0 })
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        self.s.path.pop();
        Ok(())
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
        self.s.nested("<key>".to_string(), k)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.s.nested(name.to_string(), v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.s.nested(name.to_string(), v)
    }
    fn end(self) -> Result<(), Error> {
        self.s.path.pop();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::non_finite;

    #[derive(serde::Serialize)]
    struct Inner {
        a: [f64; 2],
    }
    #[derive(serde::Serialize)]
    enum E {
        V { x: f64 },
        T(f64, f64),
    }
    #[derive(serde::Serialize)]
    struct Outer {
        inner: Inner,
        list: Vec<E>,
        opt: Option<f32>,
    }

    #[test]
    fn finds_every_non_finite_float_with_its_path() {
        let v = Outer {
            inner: Inner { a: [1.0, f64::NAN] },
            list: vec![E::V { x: f64::INFINITY }, E::T(0.0, f64::NEG_INFINITY)],
            opt: Some(f32::NAN),
        };
        assert_eq!(
            non_finite(&v),
            vec![
                "inner.a[1] = NaN",
                "list[0].V.x = inf",
                "list[1].T[1] = -inf",
                "opt = NaN"
            ]
        );
        let ok = Outer {
            inner: Inner { a: [1.0, 2.0] },
            list: vec![],
            opt: None,
        };
        assert!(non_finite(&ok).is_empty());
    }
}
