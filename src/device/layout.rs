//! Device layout strings: `N`, `vulkan:2,gl:1`, `cpu:3`.

use std::fmt;

use crate::error::{Error, Result};

/// The grammar, quoted in every layout error.
pub(crate) const GRAMMAR: &str = "a layout is empty or `auto` (one device per adapter), `N` (N devices on the preferred \
adapter), or a comma list of `backend[:count]` items such as `vulkan:2,gl:1` or `cpu:3` \
(backends: vulkan, metal, dx12, gl, webgpu, cpu)";

/// A kind of device backend, in brigade's preference order (Vulkan > Metal > DX12 > GL > WebGPU > cpu).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// Vulkan (Linux, Windows, Android; lavapipe in software).
    Vulkan,
    /// Metal (Apple).
    Metal,
    /// Direct3D 12 (Windows).
    Dx12,
    /// OpenGL / GLES through EGL or WGL (llvmpipe in software).
    Gl,
    /// WebGPU in the browser.
    WebGpu,
    /// The cpu device: host data run by the host executor (`brigade::cpu`); no wgpu.
    Cpu,
}

impl BackendKind {
    /// Every kind, in preference order.
    pub const ALL: [BackendKind; 6] = [
        BackendKind::Vulkan,
        BackendKind::Metal,
        BackendKind::Dx12,
        BackendKind::Gl,
        BackendKind::WebGpu,
        BackendKind::Cpu,
    ];

    /// The name used in layouts and [`super::DeviceInfo::backend`].
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Vulkan => "vulkan",
            BackendKind::Metal => "metal",
            BackendKind::Dx12 => "dx12",
            BackendKind::Gl => "gl",
            BackendKind::WebGpu => "webgpu",
            BackendKind::Cpu => "cpu",
        }
    }

    /// Parse a backend name (case-insensitive; aliases `vk`, `gles`, `opengl`, `egl`, `d3d12`,
    /// `browser`). `None` for unknown names.
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vulkan" | "vk" => Some(BackendKind::Vulkan),
            "metal" | "mtl" => Some(BackendKind::Metal),
            "dx12" | "d3d12" => Some(BackendKind::Dx12),
            "gl" | "gles" | "opengl" | "egl" => Some(BackendKind::Gl),
            "webgpu" | "browser" => Some(BackendKind::WebGpu),
            "cpu" => Some(BackendKind::Cpu),
            _ => None,
        }
    }

    /// The kind of a wgpu backend (`None` for the no-op backend).
    pub fn from_wgpu(b: wgpu::Backend) -> Option<BackendKind> {
        match b {
            wgpu::Backend::Vulkan => Some(BackendKind::Vulkan),
            wgpu::Backend::Metal => Some(BackendKind::Metal),
            wgpu::Backend::Dx12 => Some(BackendKind::Dx12),
            wgpu::Backend::Gl => Some(BackendKind::Gl),
            wgpu::Backend::BrowserWebGpu => Some(BackendKind::WebGpu),
            wgpu::Backend::Noop => None,
        }
    }

    /// The wgpu backend bit (empty for `Cpu`).
    pub fn to_wgpu(self) -> wgpu::Backends {
        match self {
            BackendKind::Vulkan => wgpu::Backends::VULKAN,
            BackendKind::Metal => wgpu::Backends::METAL,
            BackendKind::Dx12 => wgpu::Backends::DX12,
            BackendKind::Gl => wgpu::Backends::GL,
            BackendKind::WebGpu => wgpu::Backends::BROWSER_WEBGPU,
            BackendKind::Cpu => wgpu::Backends::empty(),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The most logical devices one layout may ask for (per backend item, or in all for a bare count).
pub const MAX_LOGICAL_DEVICES: usize = 64;

/// Which logical devices a runtime creates.
///
/// Grammar (whitespace around items is ignored, names are case-insensitive):
/// - empty or `auto`: one device per adapter found (times
///   [`super::RuntimeBuilder::devices_per_adapter`]);
/// - `N` (N ≥ 1): N devices on the first adapter in preference order (Vulkan > Metal > DX12 > GL >
///   WebGPU). With no adapter and cpu fallback allowed, N cpu devices;
/// - `backend[:count],...`: `count` (default 1) devices on the first adapter of each backend, in the
///   order written, e.g. `vulkan:2,gl:1`. `cpu:N` gives N cpu devices (no GPU needed: useful in
///   tests). Each backend may appear once.
///
/// ```
/// use brigade::device::{BackendKind, DeviceLayout};
/// assert_eq!(DeviceLayout::parse("2").unwrap(), DeviceLayout::Count(2));
/// assert_eq!(
///     DeviceLayout::parse("vulkan:2, gl").unwrap(),
///     DeviceLayout::PerBackend(vec![(BackendKind::Vulkan, 2), (BackendKind::Gl, 1)])
/// );
/// assert!(DeviceLayout::parse("vulkan:x").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum DeviceLayout {
    /// One device per adapter (times the builder's devices-per-adapter count).
    #[default]
    Auto,
    /// N devices on the first adapter in preference order.
    Count(usize),
    /// Devices per backend, in the order written.
    PerBackend(Vec<(BackendKind, usize)>),
}

fn bad(spec: &str, detail: String) -> Error {
    Error::BadDeviceSpec {
        spec: spec.to_string(),
        detail: format!("{detail}; {GRAMMAR}"),
    }
}

impl DeviceLayout {
    /// Parse a layout string; errors are [`Error::BadDeviceSpec`] naming the spec and the fix.
    pub fn parse(spec: &str) -> Result<DeviceLayout> {
        let s = spec.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("auto") {
            return Ok(DeviceLayout::Auto);
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return match s.parse::<usize>() {
                Ok(0) => Err(bad(
                    spec,
                    "0 devices: ask for at least 1, or use `auto` for one device per adapter"
                        .into(),
                )),
                Ok(n) if n <= MAX_LOGICAL_DEVICES => Ok(DeviceLayout::Count(n)),
                _ => Err(bad(
                    spec,
                    format!("`{s}` is too large a device count (at most {MAX_LOGICAL_DEVICES})"),
                )),
            };
        }
        let mut items: Vec<(BackendKind, usize)> = Vec::new();
        for raw in s.split(',') {
            let item = raw.trim();
            if item.is_empty() {
                return Err(bad(spec, "empty item between commas".into()));
            }
            let (name, count) = match item.split_once(':') {
                Some((n, c)) => (n.trim(), Some(c.trim())),
                None => (item, None),
            };
            if name.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(
                    spec,
                    format!(
                        "item `{item}` has no backend: a bare count is only valid alone (`{name}`); in a list write `vulkan:{name}`"
                    ),
                ));
            }
            let Some(kind) = BackendKind::parse(name) else {
                return Err(bad(
                    spec,
                    format!("unknown backend `{name}` in item `{item}`"),
                ));
            };
            let count = match count {
                None => 1,
                Some(c) => match c.parse::<usize>() {
                    Ok(0) => {
                        return Err(bad(
                            spec,
                            format!("item `{item}` asks for 0 devices: leave `{name}` out instead"),
                        ));
                    }
                    Ok(n) if n <= MAX_LOGICAL_DEVICES => n,
                    Ok(_) => {
                        return Err(bad(
                            spec,
                            format!(
                                "item `{item}` asks for more than {MAX_LOGICAL_DEVICES} devices"
                            ),
                        ));
                    }
                    Err(_) => {
                        return Err(bad(
                            spec,
                            format!(
                                "`{c}` in item `{item}` is not a device count: write a whole number >= 1, e.g. `{}:2`",
                                kind.name()
                            ),
                        ));
                    }
                },
            };
            if items.iter().any(|(k, _)| *k == kind) {
                return Err(bad(
                    spec,
                    format!(
                        "backend `{}` appears twice: write its total once, e.g. `{}:3`",
                        kind, kind
                    ),
                ));
            }
            items.push((kind, count));
        }
        Ok(DeviceLayout::PerBackend(items))
    }

    /// True when the layout needs no wgpu adapter (only `cpu` items).
    pub fn cpu_only(&self) -> bool {
        matches!(self, DeviceLayout::PerBackend(items) if items.iter().all(|(k, _)| *k == BackendKind::Cpu))
    }
}

impl std::str::FromStr for DeviceLayout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DeviceLayout::parse(s)
    }
}

impl fmt::Display for DeviceLayout {
    /// The canonical string, which parses back to the same layout.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceLayout::Auto => f.write_str("auto"),
            DeviceLayout::Count(n) => write!(f, "{n}"),
            DeviceLayout::PerBackend(items) => {
                for (i, (k, n)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{k}:{n}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_round_trips() {
        for (s, want) in [
            ("", DeviceLayout::Auto),
            (" auto ", DeviceLayout::Auto),
            ("3", DeviceLayout::Count(3)),
            (
                "cpu:3",
                DeviceLayout::PerBackend(vec![(BackendKind::Cpu, 3)]),
            ),
            (
                "Vulkan:2, GLES",
                DeviceLayout::PerBackend(vec![(BackendKind::Vulkan, 2), (BackendKind::Gl, 1)]),
            ),
        ] {
            let got = DeviceLayout::parse(s).unwrap();
            assert_eq!(got, want, "{s}");
            assert_eq!(DeviceLayout::parse(&got.to_string()).unwrap(), got);
        }
    }

    #[test]
    fn bad_specs_say_why() {
        for (s, needle) in [
            ("0", "0 devices"),
            ("vulkan:x", "not a device count"),
            ("vulkan:0", "0 devices"),
            ("cuda:1", "unknown backend `cuda`"),
            ("2,gl:1", "bare count"),
            ("vulkan,,gl", "empty item"),
            ("gl:1,gl:2", "appears twice"),
        ] {
            match DeviceLayout::parse(s) {
                Err(Error::BadDeviceSpec { spec, detail }) => {
                    assert_eq!(spec, s);
                    assert!(detail.contains(needle), "{s}: {detail}");
                }
                other => panic!("{s}: {other:?}"),
            }
        }
    }

    #[test]
    fn cpu_only() {
        assert!(DeviceLayout::parse("cpu:2").unwrap().cpu_only());
        assert!(!DeviceLayout::parse("cpu:2,gl").unwrap().cpu_only());
        assert!(!DeviceLayout::Auto.cpu_only());
    }
}
