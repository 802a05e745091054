//! The grammars of brigade's `BRIGADE_*` environment variables, parsed in one place so that
//! every reader accepts exactly what the documentation says, and a bad value is
//! [`Error::BadDeviceSpec`] naming the variable, the value and the grammar (never silently
//! ignored). [`check_all`] validates every variable at once; [`crate::device::RuntimeBuilder::build`]
//! calls it, so a typo fails the runtime's construction. Readers that run later and cannot return
//! an error (cache capacities, tuning switches) fall back to their default on a bad value, which
//! the runtime has already refused.
//!
//! Grammars (case-insensitive, surrounding spaces ignored; a variable set to the empty string or
//! to spaces is treated as unset):
//! - byte sizes ([`parse_bytes`]): `BRIGADE_MEMORY_LIMIT`, `BRIGADE_MAX_BINDING`,
//!   `BRIGADE_MAX_BUFFER`;
//! - positive counts ([`parse_count`]): `BRIGADE_KERNEL_CACHE`, `BRIGADE_PROGRAM_CACHE`;
//! - switches ([`parse_switch`]): `BRIGADE_MATMUL_TUNE`, `BRIGADE_MATMUL_TEXTURE`,
//!   `BRIGADE_MAPPED_READS`, `BRIGADE_MPI_FAST`;
//! - `BRIGADE_REDUCE_SPREAD`: `gpu`, `cpu` or a count of at least 256 ([`parse_spread`]);
//! - `BRIGADE_MPI_TIMEOUT`: positive seconds ([`parse_seconds`]);
//! - `BRIGADE_DEVICES`: a [`crate::device::DeviceLayout`];
//! - `BRIGADE_CACHE_DIR`, `BRIGADE_DUMP_WGSL`: a directory (any text; `off` disables the disk
//!   cache).

use std::time::Duration;

use crate::error::{Error, Result};

/// The grammar of a byte size, as error messages state it.
pub const BYTES_GRAMMAR: &str = "a number of bytes (digits, optionally followed by B), or a number with a suffix K, M, G or T (powers of 1024, optionally followed by iB or B; a decimal fraction is allowed before a suffix and rounds to the nearest byte), e.g. 1073741824, 512M, 2GiB or 1.5G; no sign, no exponent, not 0";

/// The grammar of a positive count.
pub const COUNT_GRAMMAR: &str = "a positive whole number (digits only, at least 1), e.g. 512";

/// The grammar of an on/off switch.
pub const SWITCH_GRAMMAR: &str = "on, off, 1, 0, true or false";

/// The grammar of a reduction spread.
pub const SPREAD_GRAMMAR: &str = "gpu, cpu, or a whole number of invocations of at least 256";

/// The grammar of a timeout.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub const SECONDS_GRAMMAR: &str = "a positive number of seconds (digits with an optional decimal fraction, e.g. 60 or 0.5; at most 1000000000)";

/// The value of `var` when set to something other than blanks.
pub(crate) fn get(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// `Error::BadDeviceSpec` for `var=value`, with `detail` and the grammar.
fn bad(var: &str, value: &str, detail: &str, grammar: &str) -> Error {
    Error::BadDeviceSpec {
        spec: if var.is_empty() {
            value.to_string()
        } else {
            format!("{var}={value}")
        },
        detail: if var.is_empty() {
            format!("{detail}; a value is {grammar}")
        } else {
            format!("{detail}; {var} takes {grammar} (from the environment variable {var})")
        },
    }
}

/// Whether `s` is one or more ASCII digits.
fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `s` is digits with at most one `.` between digits (`1.5`, `12`; not `1.`, `.5`).
fn decimal(s: &str) -> bool {
    match s.split_once('.') {
        Some((a, b)) => digits(a) && digits(b),
        None => digits(s),
    }
}

/// Parse a byte size of [`BYTES_GRAMMAR`]; `var` names the variable in the error (empty: a
/// builder argument or a direct call).
pub(crate) fn parse_bytes(var: &str, text: &str) -> Result<u64> {
    let fail = |detail: String| bad(var, text, &detail, BYTES_GRAMMAR);
    let t = text.trim().to_ascii_uppercase();
    if t.starts_with(['+', '-']) {
        return Err(fail(format!("{:?} has a sign", text.trim())));
    }
    // Optional unit tail: `IB` or `B` after a K/M/G/T suffix, or `B` alone after plain digits.
    let (num, shift) = {
        let body = t.strip_suffix("IB").or_else(|| t.strip_suffix('B'));
        let (head, iec) = match body {
            Some(b) => (b, t.ends_with("IB")),
            None => (t.as_str(), false),
        };
        match head.chars().last() {
            Some('K') => (&head[..head.len() - 1], 10),
            Some('M') => (&head[..head.len() - 1], 20),
            Some('G') => (&head[..head.len() - 1], 30),
            Some('T') => (&head[..head.len() - 1], 40),
            // `iB` needs a K/M/G/T before it.
            _ if iec => return Err(fail(format!("{:?} is not a number", text.trim()))),
            _ => (head, 0),
        }
    };
    let ok = if shift == 0 {
        digits(num)
    } else {
        decimal(num)
    };
    if !ok {
        return Err(fail(format!("{:?} is not a number", text.trim())));
    }
    let overflow = || fail("the size overflows 64 bits".into());
    let bytes = match num.split_once('.') {
        None => num
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1u64 << shift))
            .ok_or_else(overflow)?,
        Some((whole, frac)) => {
            // Exact: whole * 2^shift + round(frac / 10^len * 2^shift), in u128.
            let w: u128 = whole.parse().map_err(|_| overflow())?;
            // 18 digits (below 2^60) shifted by at most 40 stay below 2^100; further digits
            // cannot change the rounded byte count.
            let frac = &frac[..frac.len().min(18)];
            let f: u128 = frac.parse().map_err(|_| overflow())?;
            let scale = 10u128.pow(frac.len() as u32);
            let part = ((f << shift) + scale / 2) / scale;
            let total = w
                .checked_mul(1u128 << shift)
                .and_then(|v| v.checked_add(part))
                .ok_or_else(overflow)?;
            u64::try_from(total).map_err(|_| overflow())?
        }
    };
    if bytes == 0 {
        return Err(fail(
            "a size of 0 bytes leaves no memory for any array".into(),
        ));
    }
    Ok(bytes)
}

/// Parse a positive count of [`COUNT_GRAMMAR`].
pub(crate) fn parse_count(var: &str, text: &str) -> Result<usize> {
    let t = text.trim();
    let fail = |detail: String| bad(var, text, &detail, COUNT_GRAMMAR);
    if !digits(t) {
        return Err(fail(format!("{t:?} is not a whole number")));
    }
    match t.parse::<usize>() {
        Ok(0) => Err(fail("0 entries would cache nothing".into())),
        Ok(n) => Ok(n),
        Err(_) => Err(fail(format!("{t} overflows {} bits", usize::BITS))),
    }
}

/// Parse a switch of [`SWITCH_GRAMMAR`]: `true` for on.
pub(crate) fn parse_switch(var: &str, text: &str) -> Result<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" => Ok(true),
        "off" | "0" | "false" => Ok(false),
        t => Err(bad(
            var,
            text,
            &format!("{t:?} is not a switch"),
            SWITCH_GRAMMAR,
        )),
    }
}

/// A reduction spread: `gpu`, `cpu`, or a number of invocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spread {
    Gpu,
    Cpu,
    Invocations(usize),
}

/// Parse a spread of [`SPREAD_GRAMMAR`].
pub(crate) fn parse_spread(var: &str, text: &str) -> Result<Spread> {
    let t = text.trim().to_ascii_lowercase();
    let fail = |detail: String| bad(var, text, &detail, SPREAD_GRAMMAR);
    match t.as_str() {
        "gpu" => Ok(Spread::Gpu),
        "cpu" => Ok(Spread::Cpu),
        _ if digits(&t) => match t.parse::<usize>() {
            Ok(n) if n >= 256 => Ok(Spread::Invocations(n)),
            Ok(n) => Err(fail(format!("{n} invocations are fewer than 256"))),
            Err(_) => Err(fail(format!("{t} overflows {} bits", usize::BITS))),
        },
        _ => Err(fail(format!("{t:?} is neither gpu, cpu nor a number"))),
    }
}

/// Parse a timeout of [`SECONDS_GRAMMAR`] (`BRIGADE_MPI_TIMEOUT`, read with the `mpi` feature).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn parse_seconds(var: &str, text: &str) -> Result<Duration> {
    let t = text.trim();
    let fail = |detail: String| bad(var, text, &detail, SECONDS_GRAMMAR);
    if !decimal(t) {
        return Err(fail(format!("{t:?} is not a number of seconds")));
    }
    // Digits always parse as a finite f64 or infinity, never an error.
    let s = t.parse::<f64>().unwrap_or(f64::INFINITY);
    if s <= 0.0 {
        Err(fail("a timeout of 0 seconds fails every wait".into()))
    } else if s > 1e9 {
        Err(fail(format!("{t} seconds is more than 1000000000")))
    } else {
        Ok(Duration::from_secs_f64(s))
    }
}

/// `parse(var, value)` of `var` when set (see [`get`]).
pub(crate) fn read<T>(var: &str, parse: fn(&str, &str) -> Result<T>) -> Result<Option<T>> {
    get(var).map(|v| parse(var, &v)).transpose()
}

/// `read(var, parse)`, or `None` (and a logged warning) on a bad value: for readers that cannot
/// return an error; [`check_all`] has refused the value when a runtime was built.
pub(crate) fn read_or_warn<T>(var: &str, parse: fn(&str, &str) -> Result<T>) -> Option<T> {
    read(var, parse).unwrap_or_else(|e| {
        log::warn!("brigade: {e}; using the default");
        None
    })
}

/// Check every `BRIGADE_*` variable whose value has a grammar (all but the directories and
/// `BRIGADE_DEVICES`, which the runtime parses itself; the `BRIGADE_MPI_*` ones with the `mpi`
/// feature): the first bad one is the error.
pub(crate) fn check_all() -> Result<()> {
    use crate::device::{caches, runtime, tune};
    read(runtime::MEMORY_LIMIT_ENV, parse_bytes)?;
    read(runtime::MAX_BINDING_ENV, parse_bytes)?;
    read(runtime::MAX_BUFFER_ENV, parse_bytes)?;
    read(caches::KERNEL_CACHE_ENV, parse_count)?;
    read(caches::PROGRAM_CACHE_ENV, parse_count)?;
    read(tune::TUNE_ENV, parse_switch)?;
    read(tune::TEXTURE_ENV, parse_switch)?;
    read(tune::REDUCE_SPREAD_ENV, parse_spread)?;
    read(runtime::MAPPED_READS_ENV, parse_switch)?;
    #[cfg(feature = "mpi")]
    {
        read(crate::distributed::FAST_ENV, parse_switch)?;
        read(crate::distributed::TIMEOUT_ENV, parse_seconds)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_grammar() {
        for (t, want) in [
            ("1048576", 1u64 << 20),
            ("4096B", 4096),
            ("512m", 512 << 20),
            ("2GiB", 2 << 30),
            (" 1.5G ", 3 << 29),
            ("0.5K", 512),
            ("16777215T", 16777215 << 40),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse_bytes("V", t).unwrap(), want, "{t:?}");
        }
        for t in [
            "1e3",
            "1E3K",
            "-1",
            "+1",
            "0",
            "0.0K",
            "1.5",
            "1.",
            ".5K",
            "lots",
            "K",
            "5iB",
            "16777216T",
            "18446744073709551616",
            "1_000",
            "0x10",
            "inf",
            "NaN",
        ] {
            match parse_bytes("BRIGADE_X", t) {
                Err(Error::BadDeviceSpec { spec, detail }) => {
                    assert_eq!(spec, format!("BRIGADE_X={t}"));
                    assert!(detail.contains("BRIGADE_X takes") && detail.contains("512M"));
                }
                other => panic!("{t:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn counts_switches_spreads_seconds() {
        assert_eq!(parse_count("V", " 7 ").unwrap(), 7);
        for t in ["abc", "-1", "0", "1.5", "+3", "99999999999999999999999"] {
            assert!(parse_count("V", t).is_err(), "{t:?}");
        }
        assert!(parse_switch("V", "OFF").is_ok_and(|b| !b));
        assert!(parse_switch("V", "True").is_ok_and(|b| b));
        assert!(parse_switch("V", "yes").is_err());
        assert_eq!(parse_spread("V", "GPU").unwrap(), Spread::Gpu);
        assert_eq!(parse_spread("V", "300").unwrap(), Spread::Invocations(300));
        assert!(parse_spread("V", "255").is_err());
        assert_eq!(
            parse_seconds("V", "0.5").unwrap(),
            Duration::from_millis(500)
        );
        for t in ["0", "-1", "1e3", "inf", "1e999", "99999999999"] {
            assert!(parse_seconds("V", t).is_err(), "{t:?}");
        }
    }
}
