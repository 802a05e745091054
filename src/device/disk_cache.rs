//! The on-disk cache directory shared by everything brigade keeps between processes (compiled
//! pipelines, measured matmul choices): so a second process on the same machine starts warm.
//!
//! The directory is `BRIGADE_CACHE_DIR` when set (an empty value or `off` turns the disk cache off),
//! else `$XDG_CACHE_HOME/brigade`, else `$HOME/.cache/brigade`. In the browser there is none.
//! Every read and write is best effort: a missing, unreadable or corrupt file is a cache miss (logged
//! at debug level), never an error, and writes go to a temporary file that is renamed into place, so
//! concurrent processes never see half a file.

use std::path::PathBuf;

/// Environment variable naming the cache directory (`off` or empty: no disk cache).
pub const CACHE_DIR_ENV: &str = "BRIGADE_CACHE_DIR";

/// The cache directory, or `None` when the disk cache is off or there is no place for it.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    if cfg!(target_arch = "wasm32") {
        return None;
    }
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(v) if v.is_empty() || v == "off" => return None,
        Some(v) => return Some(PathBuf::from(v)),
        None => {}
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("brigade"));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(".cache").join("brigade"))
}

/// A file name safe on every platform: ASCII alphanumerics, `-`, `_` and `.` kept, the rest `_`.
pub(crate) fn file_name(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The bytes of cache file `name`, or `None` (no cache directory, no such file, unreadable).
pub(crate) fn read(name: &str) -> Option<Vec<u8>> {
    let path = cache_dir()?.join(file_name(name));
    match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::debug!("brigade cache: cannot read {}: {e}", path.display());
            }
            None
        }
    }
}

/// Write cache file `name` atomically (temporary file, then rename). Returns whether it was written.
pub(crate) fn write(name: &str, bytes: &[u8]) -> bool {
    let Some(dir) = cache_dir() else {
        return false;
    };
    let result = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(file_name(name));
        let tmp = dir.join(format!(".{}.{}.tmp", file_name(name), std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &path)
    })();
    match result {
        Ok(()) => true,
        Err(e) => {
            log::debug!(
                "brigade cache: cannot write {name} in {}: {e}",
                dir.display()
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_sanitized() {
        assert_eq!(
            file_name("pipelines-llvmpipe (LLVM 15, 256 bits)/vk"),
            "pipelines-llvmpipe__LLVM_15__256_bits__vk"
        );
        assert_eq!(file_name("matmul.v1.json"), "matmul.v1.json");
    }
}
