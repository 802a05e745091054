//! The on-disk pipeline cache (Vulkan `PIPELINE_CACHE`): written by one process and read by the
//! next, ignored when damaged, never written with `BRIGADE_CACHE_DIR=off`. Each case runs this
//! binary again as a child process, since the cache directory is read when devices are made.

use std::path::{Path, PathBuf};
use std::process::Command;

use brigade::device::CACHE_DIR_ENV;
use brigade::{Array, Runtime, Tensor, jit};

const CHILD: &str = "BRIGADE_TEST_PIPELINE_CHILD";

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brigade-pc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run the child test with the environment given; returns what it printed (panics if it failed).
fn child(envs: &[(&str, &Path)], expect_loaded: &str) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_compiles_and_checks", "--nocapture"])
        .env(CHILD, expect_loaded);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "child did not run:\n{text}");
    text
}

fn cache_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("pipelines-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The first process writes the file, the second loads it (a non-zero amount of data), a damaged
/// file is ignored (the process starts empty, computes right, and writes a good file again).
#[test]
fn the_cache_file_is_written_reused_and_survives_damage() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let dir = temp_dir("reuse");
    child(&[(CACHE_DIR_ENV, &dir)], "empty");
    let files = cache_files(&dir);
    assert_eq!(
        files.len(),
        1,
        "one cache file expected in {}: {files:?}",
        dir.display()
    );
    let good = std::fs::read(&files[0]).unwrap();
    assert!(
        good.starts_with(b"BRGDPC01") && good.len() > 24,
        "{} bytes",
        good.len()
    );
    child(&[(CACHE_DIR_ENV, &dir)], "loaded");
    // Damage: a flipped payload byte, a truncation, garbage, an empty file.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    for bad in [
        flipped,
        good[..good.len() / 2].to_vec(),
        vec![0xAB; 300],
        Vec::new(),
    ] {
        std::fs::write(&files[0], &bad).unwrap();
        child(&[(CACHE_DIR_ENV, &dir)], "empty");
        let again = std::fs::read(&files[0]).unwrap();
        assert!(
            again.starts_with(b"BRGDPC01"),
            "the damaged file was not replaced"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `BRIGADE_CACHE_DIR=off`: no pipeline cache and no file anywhere (the XDG and HOME fallbacks
/// point at a directory that must stay empty; Mesa's shader cache is pointed elsewhere).
#[test]
fn cache_dir_off_writes_nothing() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let home = temp_dir("off");
    // Mesa's own shader cache also defaults to XDG_CACHE_HOME: sent elsewhere.
    let mesa = temp_dir("off-mesa");
    child(
        &[
            (CACHE_DIR_ENV, Path::new("off")),
            ("XDG_CACHE_HOME", &home),
            ("HOME", &home),
            ("MESA_SHADER_CACHE_DIR", &mesa),
        ],
        "none",
    );
    let left: Vec<_> = std::fs::read_dir(&home).unwrap().collect();
    assert!(
        left.is_empty(),
        "files written with the cache off: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&home);
    let _ = std::fs::remove_dir_all(&mesa);
}

/// The child: a Vulkan and a GL device, each compiles and runs kernels checked against values
/// computed here; the Vulkan device's loaded cache data is what the parent expects (`empty`,
/// `loaded` or `none`); GL never has a pipeline cache.
#[test]
fn child_compiles_and_checks() {
    let Ok(expect) = std::env::var(CHILD) else {
        return;
    };
    let rt = pollster::block_on(
        Runtime::builder()
            .layout_str("vulkan:1,gl:1")
            .allow_cpu_fallback(false)
            .build(),
    )
    .unwrap();
    let xs: Vec<f32> = (0..4099).map(|i| ((i % 101) as f32 - 50.0) / 8.0).collect();
    for dev in rt.devices() {
        let loaded = dev.pipeline_cache_loaded();
        if dev.info().backend == "gl" {
            assert_eq!(loaded, None, "GL has no pipeline cache");
        } else {
            match expect.as_str() {
                "none" => assert_eq!(loaded, None),
                "empty" => assert_eq!(loaded, Some(0)),
                "loaded" => assert!(loaded.is_some_and(|b| b > 0), "{loaded:?}"),
                other => panic!("unknown expectation {other}"),
            }
        }
        let x = Array::from_vec(xs.clone(), &[4099]).unwrap();
        let y = jit(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0, a[0].sum_all()])
            .on(dev)
            .call(&[x])
            .unwrap();
        let got = y[0].to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&xs).all(|(g, v)| *g == v * 2.0 + 1.0));
        let want: f64 = xs.iter().map(|&v| v as f64).sum();
        let s = y[1].to_vec::<f32>().unwrap()[0] as f64;
        assert!(
            (s - want).abs() < 1e-3 * want.abs().max(1.0),
            "{s} vs {want}"
        );
        if dev.info().backend == "vulkan" {
            assert_eq!(dev.save_pipeline_cache(), expect != "none");
        }
    }
}
