//! Fashion-MNIST from Debian's `dataset-fashion-mnist` package: a small reader of its gzipped IDX
//! files (28×28 grey images of ten kinds of clothing, 60 000 to train on and 10 000 held out).
//!
//! Nothing is downloaded: the files come from the package (`/usr/share/datasets/fashion-mnist`,
//! or the folder in `BRIGADE_FASHION_MNIST_DIR`). An example or test includes this file with
//! `#[path = "common/fashion_mnist.rs"] mod fashion_mnist;` (from `tests/`:
//! `#[path = "../examples/common/fashion_mnist.rs"]`). It lives beside the examples, not in the
//! library, because it needs `flate2` (a dev-dependency) and a file system: neither belongs in
//! brigade itself, which also builds for the browser.
//!
//! IDX: a big-endian header (magic `0x0000_08DD`, `08` = unsigned bytes, `DD` = the number of
//! dimensions; then each dimension as a u32), then the bytes in row-major order.
#![allow(dead_code)] // Each including crate uses a part.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

/// Where Debian's `dataset-fashion-mnist` puts the files.
pub const DEBIAN_DIR: &str = "/usr/share/datasets/fashion-mnist";
/// The environment variable naming another folder with the same four `.gz` files.
pub const DIR_VAR: &str = "BRIGADE_FASHION_MNIST_DIR";
/// Image height and width.
pub const SIDE: usize = 28;
/// The number of classes (labels 0–9).
pub const CLASSES: usize = 10;
/// The classes' names, by label.
pub const CLASS_NAMES: [&str; CLASSES] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;
const FIX: &str = "install Debian's package (`apt-get install dataset-fashion-mnist`; scripts/test.sh \
                   does) or set BRIGADE_FASHION_MNIST_DIR to a folder with the four .gz IDX files";

/// Which half of the data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The 60 000 training images (`train-*`).
    Train,
    /// The 10 000 held-out images (`t10k-*`).
    Test,
}

impl Split {
    fn prefix(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "t10k",
        }
    }
}

/// Why a file could not be read; every message names the file and the fix.
#[derive(Debug)]
pub enum DatasetError {
    /// The file could not be opened or decompressed.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The header's magic number is not the IDX type expected.
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic number found.
        got: u32,
        /// The one expected.
        want: u32,
    },
    /// The header's sizes, or the bytes after it, are not what a Fashion-MNIST file holds.
    BadSize {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// A label outside 0–9.
    BadLabel {
        /// The file.
        path: PathBuf,
        /// Its index in the file.
        index: usize,
        /// The byte found.
        label: u8,
    },
}

impl fmt::Display for DatasetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatasetError::Io { path, source } => {
                write!(
                    f,
                    "Fashion-MNIST: cannot read {}: {source}; {FIX}",
                    path.display()
                )
            }
            DatasetError::BadMagic { path, got, want } => write!(
                f,
                "Fashion-MNIST: {} is not an IDX file of this kind (magic {got:#010x}, expected \
                 {want:#010x}); {FIX}",
                path.display()
            ),
            DatasetError::BadSize { path, detail } => {
                write!(f, "Fashion-MNIST: {}: {detail}; {FIX}", path.display())
            }
            DatasetError::BadLabel { path, index, label } => write!(
                f,
                "Fashion-MNIST: {}: label {label} at index {index} is not a class 0-9; {FIX}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DatasetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DatasetError::Io { source, .. } => Some(source),
            DatasetError::BadMagic { .. }
            | DatasetError::BadSize { .. }
            | DatasetError::BadLabel { .. } => None,
        }
    }
}

/// Images and their labels, in the files' order.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// `len × 1 × 28 × 28` grey levels in [0, 1] (byte / 255), row-major.
    pub images: Vec<f32>,
    /// `len` labels, 0–9 (see [`CLASS_NAMES`]).
    pub labels: Vec<i32>,
    /// How many images the file's header says it holds (all of them, not only those read).
    pub file_count: usize,
}

impl Dataset {
    /// The number of images read.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether no image was read.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The images' shape, `[n, 1, 28, 28]` (NCHW with one channel).
    pub fn shape(&self) -> [usize; 4] {
        [self.len(), 1, SIDE, SIDE]
    }
}

/// The folder the files are read from: `BRIGADE_FASHION_MNIST_DIR` when set (and not empty), else
/// Debian's [`DEBIAN_DIR`].
pub fn data_dir() -> PathBuf {
    match std::env::var_os(DIR_VAR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEBIAN_DIR),
    }
}

/// The images and labels files of `split` in `dir`.
pub fn files(dir: &Path, split: Split) -> (PathBuf, PathBuf) {
    let p = split.prefix();
    (
        dir.join(format!("{p}-images-idx3-ubyte.gz")),
        dir.join(format!("{p}-labels-idx1-ubyte.gz")),
    )
}

/// Read `split` from [`data_dir`]: all of it, or its first `limit` images (only that much of each
/// file is decompressed, so a quick run stays quick).
pub fn load(split: Split, limit: Option<usize>) -> Result<Dataset, DatasetError> {
    load_from(&data_dir(), split, limit)
}

/// [`load`] from the folder `dir`.
pub fn load_from(dir: &Path, split: Split, limit: Option<usize>) -> Result<Dataset, DatasetError> {
    let (images_path, labels_path) = files(dir, split);
    let (count, pixels) = read_idx(&images_path, IMAGES_MAGIC, &[SIDE, SIDE], limit)?;
    let (label_count, labels) = read_idx(&labels_path, LABELS_MAGIC, &[], limit)?;
    if label_count != count {
        return Err(DatasetError::BadSize {
            path: labels_path,
            detail: format!(
                "holds {label_count} labels but {} holds {count} images",
                images_path.display()
            ),
        });
    }
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= CLASSES)
    {
        return Err(DatasetError::BadLabel {
            path: labels_path,
            index,
            label,
        });
    }
    Ok(Dataset {
        images: pixels.iter().map(|&b| f32::from(b) / 255.0).collect(),
        labels: labels.iter().map(|&l| i32::from(l)).collect(),
        file_count: count,
    })
}

fn read_u32(r: &mut impl Read, path: &Path) -> Result<u32, DatasetError> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)
        .map_err(|e| io_or_short(path, e, "header"))?;
    Ok(u32::from_be_bytes(b))
}

fn io_or_short(path: &Path, e: io::Error, what: &str) -> DatasetError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        DatasetError::BadSize {
            path: path.to_path_buf(),
            detail: format!("the file ends inside its {what}"),
        }
    } else {
        DatasetError::Io {
            path: path.to_path_buf(),
            source: e,
        }
    }
}

/// One gzipped IDX file of unsigned bytes: checks the magic number and that every dimension after
/// the first is `inner`; returns the first dimension (the item count) and the first `limit` items'
/// bytes (all of them when `limit` is `None`, and then also that nothing follows them).
fn read_idx(
    path: &Path,
    magic: u32,
    inner: &[usize],
    limit: Option<usize>,
) -> Result<(usize, Vec<u8>), DatasetError> {
    let file = File::open(path).map_err(|source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut r = GzDecoder::new(BufReader::new(file));
    let got = read_u32(&mut r, path)?;
    if got != magic {
        return Err(DatasetError::BadMagic {
            path: path.to_path_buf(),
            got,
            want: magic,
        });
    }
    let count = read_u32(&mut r, path)? as usize;
    let mut dims = Vec::with_capacity(inner.len());
    for _ in inner {
        dims.push(read_u32(&mut r, path)? as usize);
    }
    if dims != inner {
        return Err(DatasetError::BadSize {
            path: path.to_path_buf(),
            detail: format!("items of shape {dims:?}, expected {inner:?}"),
        });
    }
    let item: usize = inner.iter().product();
    let n = limit.map_or(count, |l| l.min(count));
    let mut bytes = vec![0u8; n * item];
    r.read_exact(&mut bytes)
        .map_err(|e| io_or_short(path, e, &format!("first {n} of its {count} items")))?;
    if limit.is_none() {
        // The whole file was asked for: its length must match its header exactly.
        let mut rest = Vec::new();
        r.read_to_end(&mut rest)
            .map_err(|e| io_or_short(path, e, "data"))?;
        if !rest.is_empty() {
            return Err(DatasetError::BadSize {
                path: path.to_path_buf(),
                detail: format!(
                    "{} bytes follow the {count} items its header announces",
                    rest.len()
                ),
            });
        }
    }
    Ok((count, bytes))
}
