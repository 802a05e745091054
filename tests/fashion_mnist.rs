//! The Fashion-MNIST reader (examples/common/fashion_mnist.rs) against numpy reading the same
//! files from Debian's `dataset-fashion-mnist` (tests/data/fashion_mnist.rs, printed by
//! scripts/fashion_mnist_vectors.py), and its typed errors on damaged files.
//!
//! Needs the package (scripts/test.sh installs it) or BRIGADE_FASHION_MNIST_DIR; without either,
//! the tests fail with the fix in the message rather than skip.

#[path = "../examples/common/fashion_mnist.rs"]
mod fashion_mnist;
#[path = "data/fashion_mnist.rs"]
mod want;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use fashion_mnist::{CLASSES, DatasetError, SIDE, Split, load, load_from};

const FIRST: usize = 32;

/// Each byte back from the reader's f32 (`byte / 255` is exact enough to invert by rounding).
fn bytes(images: &[f32]) -> Vec<u64> {
    images.iter().map(|&v| (v * 255.0).round() as u64).collect()
}

struct Want {
    count: usize,
    rows: usize,
    cols: usize,
    histogram: &'static [usize],
    first_labels: &'static [i32],
    first_sums: &'static [u32],
    row14: &'static [u8],
    total: u64,
}

fn want(split: Split) -> Want {
    match split {
        Split::Train => Want {
            count: want::TRAIN_COUNT,
            rows: want::TRAIN_ROWS,
            cols: want::TRAIN_COLS,
            histogram: want::TRAIN_LABEL_HISTOGRAM,
            first_labels: want::TRAIN_FIRST_LABELS,
            first_sums: want::TRAIN_FIRST_PIXEL_SUMS,
            row14: want::TRAIN_IMAGE0_ROW14,
            total: want::TRAIN_PIXEL_TOTAL,
        },
        Split::Test => Want {
            count: want::TEST_COUNT,
            rows: want::TEST_ROWS,
            cols: want::TEST_COLS,
            histogram: want::TEST_LABEL_HISTOGRAM,
            first_labels: want::TEST_FIRST_LABELS,
            first_sums: want::TEST_FIRST_PIXEL_SUMS,
            row14: want::TEST_IMAGE0_ROW14,
            total: want::TEST_PIXEL_TOTAL,
        },
    }
}

/// Every image and label of both splits, against numpy's reading of the same files.
#[test]
fn whole_files_match_numpy() {
    for split in [Split::Train, Split::Test] {
        let w = want(split);
        let d = load(split, None).unwrap_or_else(|e| panic!("{split:?}: {e}"));
        assert_eq!((w.rows, w.cols), (SIDE, SIDE), "{split:?}");
        assert_eq!(d.file_count, w.count, "{split:?}");
        assert_eq!(d.len(), w.count, "{split:?}");
        assert_eq!(d.shape(), [w.count, 1, SIDE, SIDE], "{split:?}");
        assert_eq!(d.images.len(), w.count * SIDE * SIDE, "{split:?}");
        assert!(
            d.images.iter().all(|v| (0.0..=1.0).contains(v)),
            "{split:?}: a pixel outside [0, 1]"
        );
        let mut hist = vec![0usize; CLASSES];
        for &l in &d.labels {
            hist[l as usize] += 1;
        }
        assert_eq!(hist, w.histogram, "{split:?} label histogram");
        assert_eq!(&d.labels[..FIRST], w.first_labels, "{split:?} first labels");
        let b = bytes(&d.images);
        let sums: Vec<u32> = b[..FIRST * SIDE * SIDE]
            .chunks(SIDE * SIDE)
            .map(|img| img.iter().sum::<u64>() as u32)
            .collect();
        assert_eq!(sums, w.first_sums, "{split:?} first images' pixel sums");
        let row14: Vec<u8> = b[14 * SIDE..15 * SIDE].iter().map(|&v| v as u8).collect();
        assert_eq!(row14, w.row14, "{split:?} image 0, row 14");
        assert_eq!(
            b.iter().sum::<u64>(),
            w.total,
            "{split:?} sum of every pixel byte"
        );
    }
}

/// A limited read decompresses only a prefix and gives the same first images and labels, and
/// the header's count.
#[test]
fn a_prefix_is_the_start_of_the_file() {
    let w = want(Split::Train);
    let d = load(Split::Train, Some(FIRST)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.len(), FIRST);
    assert_eq!(d.file_count, w.count);
    assert_eq!(d.labels, w.first_labels);
    let sums: Vec<u32> = bytes(&d.images)
        .chunks(SIDE * SIDE)
        .map(|img| img.iter().sum::<u64>() as u32)
        .collect();
    assert_eq!(sums, w.first_sums);
    let big = load(Split::Test, Some(1 << 30)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        big.len(),
        want(Split::Test).count,
        "a limit past the end reads all"
    );
}

/// A folder of our own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("brigade-fmnist-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Gzip `header` (big-endian u32s) followed by `body` into `dir/name`.
fn write_idx(dir: &Path, name: &str, header: &[u32], body: &[u8]) {
    let f = std::fs::File::create(dir.join(name)).unwrap();
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    for h in header {
        gz.write_all(&h.to_be_bytes()).unwrap();
    }
    gz.write_all(body).unwrap();
    gz.finish().unwrap();
}

fn assert_names_file_and_fix(e: &DatasetError, file: &str) {
    let msg = e.to_string();
    assert!(msg.contains(file), "{msg}");
    assert!(
        msg.contains("apt-get install dataset-fashion-mnist"),
        "{msg}"
    );
}

/// Missing, mislabelled, truncated, oversized and inconsistent files: typed errors naming the
/// file and the fix.
#[test]
fn damaged_files_are_typed_errors() {
    let t = TempDir::new("bad");
    let dir = &t.0;
    let img = "t10k-images-idx3-ubyte.gz";
    let lab = "t10k-labels-idx1-ubyte.gz";
    let pixels: Vec<u8> = (0..2 * SIDE * SIDE).map(|i| (i * 7 % 256) as u8).collect();
    let s = SIDE as u32;

    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert!(matches!(e, DatasetError::Io { .. }), "{e}");
    assert_names_file_and_fix(&e, img);

    // Two good images and labels first: the reader accepts them.
    write_idx(dir, img, &[0x803, 2, s, s], &pixels);
    write_idx(dir, lab, &[0x801, 2], &[3, 9]);
    let d = load_from(dir, Split::Test, None).unwrap();
    assert_eq!((d.len(), d.labels.clone()), (2, vec![3, 9]));
    assert_eq!(
        bytes(&d.images),
        pixels.iter().map(|&b| u64::from(b)).collect::<Vec<_>>()
    );

    // The labels' magic on the images file.
    write_idx(dir, img, &[0x801, 2, s, s], &pixels);
    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert!(
        matches!(
            e,
            DatasetError::BadMagic {
                got: 0x801,
                want: 0x803,
                ..
            }
        ),
        "{e}"
    );
    assert_names_file_and_fix(&e, img);

    // 27×28 items.
    write_idx(dir, img, &[0x803, 2, s - 1, s], &pixels);
    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert!(matches!(e, DatasetError::BadSize { .. }), "{e}");
    assert_names_file_and_fix(&e, img);

    // The header promises three images; two follow.
    write_idx(dir, img, &[0x803, 3, s, s], &pixels);
    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert!(matches!(e, DatasetError::BadSize { .. }), "{e}");
    assert!(e.to_string().contains("ends inside"), "{e}");
    assert_names_file_and_fix(&e, img);

    // The header says one image; two follow (only a whole read can tell).
    write_idx(dir, img, &[0x803, 1, s, s], &pixels);
    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert!(matches!(e, DatasetError::BadSize { .. }), "{e}");
    assert_names_file_and_fix(&e, img);

    // Images and labels disagree on the count.
    write_idx(dir, img, &[0x803, 2, s, s], &pixels);
    write_idx(dir, lab, &[0x801, 1], &[3]);
    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert!(matches!(e, DatasetError::BadSize { .. }), "{e}");
    assert_names_file_and_fix(&e, lab);

    // A label that is no class.
    write_idx(dir, lab, &[0x801, 2], &[3, 10]);
    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert!(
        matches!(
            e,
            DatasetError::BadLabel {
                index: 1,
                label: 10,
                ..
            }
        ),
        "{e}"
    );
    assert_names_file_and_fix(&e, lab);

    // Not gzip at all.
    std::fs::write(dir.join(img), b"plain bytes, no gzip header").unwrap();
    let e = load_from(dir, Split::Test, None).unwrap_err();
    assert_names_file_and_fix(&e, img);
}
