//! One row group written column by column with parquet's own typed column writers: required
//! columns as plain values, optional ones with definition levels (1 present, 0 null), and
//! lists in the standard 3-level `LIST` layout (definition and repetition levels of 1).

use parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DataType, DoubleType, Int32Type, Int64Type,
};
use parquet::errors::ParquetError;
use parquet::file::writer::SerializedRowGroupWriter;
use std::io::Write;

/// The next columns of a row group, in the table's schema order.
pub struct RowGroup<'a, W: Write + Send>(pub SerializedRowGroupWriter<'a, W>);

type Result = std::result::Result<(), ParquetError>;

impl<W: Write + Send> RowGroup<'_, W> {
    fn column<T: DataType>(
        &mut self,
        values: &[T::T],
        def: Option<&[i16]>,
        rep: Option<&[i16]>,
    ) -> Result {
        let mut c = self
            .0
            .next_column()?
            .expect("the schema has one more column");
        c.typed::<T>().write_batch(values, def, rep)?;
        c.close()
    }

    fn optional<T: DataType>(&mut self, v: impl IntoIterator<Item = Option<T::T>>) -> Result {
        let mut values = Vec::new();
        let mut def = Vec::new();
        for x in v {
            def.push(i16::from(x.is_some()));
            values.extend(x);
        }
        self.column::<T>(&values, Some(&def), None)
    }

    pub fn i64s(&mut self, v: impl IntoIterator<Item = i64>) -> Result {
        self.i64_slice(&v.into_iter().collect::<Vec<_>>())
    }

    /// [`Self::i64s`] of values already in a slice, written without a copy.
    pub fn i64_slice(&mut self, v: &[i64]) -> Result {
        self.column::<Int64Type>(v, None, None)
    }

    pub fn opt_i64s(&mut self, v: impl IntoIterator<Item = Option<i64>>) -> Result {
        self.optional::<Int64Type>(v)
    }

    pub fn i32s(&mut self, v: impl IntoIterator<Item = i32>) -> Result {
        self.column::<Int32Type>(&v.into_iter().collect::<Vec<_>>(), None, None)
    }

    pub fn opt_i32s(&mut self, v: impl IntoIterator<Item = Option<i32>>) -> Result {
        self.optional::<Int32Type>(v)
    }

    pub fn f64s(&mut self, v: impl IntoIterator<Item = f64>) -> Result {
        self.column::<DoubleType>(&v.into_iter().collect::<Vec<_>>(), None, None)
    }

    pub fn bools(&mut self, v: impl IntoIterator<Item = bool>) -> Result {
        self.column::<BoolType>(&v.into_iter().collect::<Vec<_>>(), None, None)
    }

    /// UTF-8 strings (`BYTE_ARRAY (STRING)`), already as byte arrays.
    pub fn byte_arrays(&mut self, v: &[ByteArray]) -> Result {
        self.column::<ByteArrayType>(v, None, None)
    }

    pub fn texts<'s>(&mut self, v: impl IntoIterator<Item = &'s str>) -> Result {
        self.byte_arrays(&v.into_iter().map(ByteArray::from).collect::<Vec<_>>())
    }

    pub fn opt_texts<'s>(&mut self, v: impl IntoIterator<Item = Option<&'s str>>) -> Result {
        self.optional::<ByteArrayType>(v.into_iter().map(|s| s.map(ByteArray::from)))
    }

    /// A required list of required 64-bit integers per row; an empty list has definition 0.
    pub fn i64_lists<'s>(&mut self, rows: impl IntoIterator<Item = &'s [i64]>) -> Result {
        let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
        for row in rows {
            if row.is_empty() {
                def.push(0);
                rep.push(0);
            }
            for (i, &x) in row.iter().enumerate() {
                values.push(x);
                def.push(1);
                rep.push(i16::from(i > 0));
            }
        }
        self.column::<Int64Type>(&values, Some(&def), Some(&rep))
    }
}
