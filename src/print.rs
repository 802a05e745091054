//! How arrays print: `Display` for [`Array`] and [`HostArray`] in the style of numpy and JAX.
//! Arrays of more than [`SUMMARY_THRESHOLD`] elements show the first and last [`EDGE_ITEMS`]
//! entries of each axis with `...` between them, as numpy does. Printing a device array reads it
//! back (it waits for the device); `Debug` stays one line and never reads.

use std::fmt;

use crate::array::Array;
use crate::host::{HostArray, HostData};

/// Arrays with more elements than this print summarized (numpy's `threshold`).
pub(crate) const SUMMARY_THRESHOLD: usize = 1000;
/// Entries shown at each end of a summarized axis (numpy's `edgeitems`).
pub(crate) const EDGE_ITEMS: usize = 3;
/// Rows of the innermost axis wrap past this many characters (numpy's `linewidth`).
const LINE_WIDTH: usize = 75;

/// The values in nested brackets, columns aligned, then the dtype, as numpy prints an array.
/// More than 1000 elements print summarized: the first and last 3 entries of each axis with `...`
/// between them.
///
/// ```
/// use brigade::HostArray;
/// let x = HostArray::from_vec(vec![1.5f32, -2.0, 0.25, 4.0], &[2, 2])?;
/// assert_eq!(x.to_string(), "HostArray([[ 1.5, -2.0],\n           [0.25,  4.0]], dtype=f32)");
/// # Ok::<(), brigade::Error>(())
/// ```
impl fmt::Display for HostArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = "HostArray(";
        write!(
            f,
            "{prefix}{}, dtype={})",
            body(self, prefix.len()),
            self.dtype()
        )
    }
}

/// `Array([[0.1, 0.2], ...], dtype=f32, device=vulkan:0)`: the values (read back from the device,
/// assembled from the shards of a sharded array), the dtype, and where the array lives (its
/// device, or its sharding). A read that fails prints the array's type and the error instead of
/// values; on wasm, where reads cannot block, a device array prints its type and how to read it.
/// `{:?}` stays one line and reads nothing.
///
/// ```
/// use brigade::Array;
/// let x = Array::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
/// assert_eq!(x.to_string(), "Array([[1, 2],\n       [3, 4]], dtype=i32)");
/// # Ok::<(), brigade::Error>(())
/// ```
impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = placement(self);
        let prefix = "Array(";
        match read(self) {
            Ok(h) => write!(
                f,
                "{prefix}{}, dtype={}{place})",
                body(&h, prefix.len()),
                self.dtype()
            ),
            Err(why) => write!(
                f,
                "{prefix}{}{place}; values not shown: {why})",
                self.aval()
            ),
        }
    }
}

fn placement(a: &Array) -> String {
    if let Some(d) = a.device() {
        let info = d.info();
        return format!(", device={}:{}", info.backend, info.index);
    }
    if let Some(s) = a.sharding() {
        return format!(", sharding={s}");
    }
    if let Some(shards) = a.shards() {
        return format!(", shards={}", shards.len());
    }
    String::new()
}

#[cfg(not(target_arch = "wasm32"))]
fn read(a: &Array) -> Result<HostArray, String> {
    a.to_host().map_err(|e| e.to_string())
}

#[cfg(target_arch = "wasm32")]
fn read(a: &Array) -> Result<HostArray, String> {
    match a.host() {
        Some(h) => Ok(h.clone()),
        None => {
            Err("the browser cannot wait for a read: print `array.to_host_async().await?`".into())
        }
    }
}

/// The nested brackets of `h`, continuation lines indented by `indent` columns.
fn body(h: &HostArray, indent: usize) -> String {
    let shape = &h.shape;
    let summarize = h.data.len() > SUMMARY_THRESHOLD;
    // Which indices of each axis are shown (`None` marks the `...`).
    let shown: Vec<Vec<Option<usize>>> = shape
        .iter()
        .map(|&n| {
            if summarize && n > 2 * EDGE_ITEMS {
                (0..EDGE_ITEMS)
                    .map(Some)
                    .chain([None])
                    .chain((n - EDGE_ITEMS..n).map(Some))
                    .collect()
            } else {
                (0..n).map(Some).collect()
            }
        })
        .collect();
    // Every shown element padded to the widest, as numpy aligns columns.
    let mut texts = Vec::new();
    collect(h, &shown, 0, 0, &mut texts);
    let width = texts.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    let mut it = texts.into_iter();
    let mut out = String::new();
    write_axis(&mut out, &shown, 0, indent, width, &mut it);
    out
}

/// The formatted elements, in the order `write_axis` prints them.
fn collect(
    h: &HostArray,
    shown: &[Vec<Option<usize>>],
    axis: usize,
    offset: usize,
    texts: &mut Vec<String>,
) {
    if axis == shown.len() {
        texts.push(element(&h.data, offset));
        return;
    }
    let stride: usize = h.shape[axis + 1..].iter().product();
    for i in shown[axis].iter().flatten() {
        collect(h, shown, axis + 1, offset + i * stride, texts);
    }
}

fn write_axis(
    out: &mut String,
    shown: &[Vec<Option<usize>>],
    axis: usize,
    indent: usize,
    width: usize,
    texts: &mut impl Iterator<Item = String>,
) {
    let rank = shown.len();
    if axis == rank {
        // A rank-0 array: the value alone.
        out.push_str(&texts.next().unwrap_or_default());
        return;
    }
    out.push('[');
    if axis + 1 == rank {
        // The innermost axis: elements on one line, wrapped at the line width.
        let mut col = indent + 1;
        for (k, i) in shown[axis].iter().enumerate() {
            let item = match i {
                Some(_) => format!("{:>width$}", texts.next().unwrap_or_default()),
                None => "...".to_string(),
            };
            let last = k + 1 == shown[axis].len();
            let need = item.chars().count() + if last { 1 } else { 2 };
            if k > 0 && col + need > LINE_WIDTH {
                out.push('\n');
                out.push_str(&" ".repeat(indent + 1));
                col = indent + 1;
            }
            out.push_str(&item);
            col += item.chars().count();
            if !last {
                out.push_str(", ");
                col += 2;
            }
        }
    } else {
        // Outer axes: one sub-array per line, separated by blank lines for each axis above the
        // innermost two (numpy's layout).
        let blank = "\n".repeat(rank - axis - 2);
        for (k, i) in shown[axis].iter().enumerate() {
            if k > 0 {
                out.push_str(",\n");
                out.push_str(&blank);
                out.push_str(&" ".repeat(indent + 1));
            }
            match i {
                Some(_) => write_axis(out, shown, axis + 1, indent + 1, width, texts),
                None => out.push_str("..."),
            }
        }
    }
    out.push(']');
}

/// One element as text: floats in Rust's shortest round-trip form (`0.1`, `1.0`, `1e-7`), and
/// `nan`, `inf`, `-inf` as numpy writes them.
fn element(d: &HostData, i: usize) -> String {
    fn float(x: f64, text: String) -> String {
        if x.is_nan() {
            "nan".into()
        } else if x.is_infinite() {
            if x > 0.0 { "inf".into() } else { "-inf".into() }
        } else {
            text
        }
    }
    match d {
        HostData::F32(v) => float(v[i] as f64, format!("{:?}", v[i])),
        HostData::F64(v) => float(v[i], format!("{:?}", v[i])),
        HostData::I32(v) => v[i].to_string(),
        HostData::U32(v) => v[i].to_string(),
        HostData::Bool(v) => v[i].to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host<T: crate::Element>(v: Vec<T>, shape: &[usize]) -> HostArray {
        HostArray::from_vec(v, shape).unwrap()
    }

    #[test]
    fn small_arrays_print_every_value_aligned() {
        assert_eq!(host(vec![3i32], &[]).to_string(), "HostArray(3, dtype=i32)");
        assert_eq!(
            host(vec![1u32, 20, 300], &[3]).to_string(),
            "HostArray([  1,  20, 300], dtype=u32)"
        );
        assert_eq!(
            host(vec![true, false], &[2]).to_string(),
            "HostArray([ true, false], dtype=bool)"
        );
        let nonfinite = host(vec![f32::NAN, f32::INFINITY, -f32::INFINITY, 1e-7], &[4]);
        assert_eq!(
            nonfinite.to_string(),
            "HostArray([ nan,  inf, -inf, 1e-7], dtype=f32)"
        );
        // Rank 3: a blank line between the blocks of the outermost axis.
        let x = host((0..8).collect::<Vec<i32>>(), &[2, 2, 2]);
        assert_eq!(
            x.to_string(),
            "HostArray([[[0, 1],\n            [2, 3]],\n\n           [[4, 5],\n            [6, 7]]], dtype=i32)"
        );
    }

    #[test]
    fn large_arrays_are_summarized_at_both_ends_of_every_axis() {
        let n = 40;
        let x = host((0..(n * n) as i32).collect::<Vec<_>>(), &[n, n]);
        let s = x.to_string();
        let lines: Vec<&str> = s.lines().collect();
        // 3 rows, the `...` row, 3 rows.
        assert_eq!(lines.len(), 7, "{s}");
        assert_eq!(
            lines[0],
            "HostArray([[   0,    1,    2, ...,   37,   38,   39],"
        );
        assert_eq!(lines[3].trim(), "...,");
        assert_eq!(
            lines[6],
            "           [1560, 1561, 1562, ..., 1597, 1598, 1599]], dtype=i32)"
        );
        // At the threshold itself nothing is left out.
        let y = host(vec![0.5f32; SUMMARY_THRESHOLD], &[SUMMARY_THRESHOLD]);
        assert!(!y.to_string().contains("..."));
    }

    #[test]
    fn long_rows_wrap_at_the_line_width() {
        let x = host((0..30).collect::<Vec<i32>>(), &[30]);
        let s = x.to_string();
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines.len() > 1, "{s}");
        for line in &lines[..lines.len() - 1] {
            assert!(line.chars().count() <= LINE_WIDTH, "{line}");
        }
        // Continuation lines start under the first element.
        assert!(s.lines().nth(1).unwrap().starts_with("           "), "{s}");
        // Every value is still there, in order.
        let values: Vec<i32> = s
            .trim_start_matches("HostArray([")
            .split(']')
            .next()
            .unwrap()
            .split(',')
            .map(|t| t.trim().parse().unwrap())
            .collect();
        assert_eq!(values, (0..30).collect::<Vec<_>>());
    }
}
