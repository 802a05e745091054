//! Shared by the tests of arrays larger than one storage binding (`tests/segments*.rs`): devices
//! with a forced 64 KiB binding limit, array shapes over it, and checks that a program really
//! binds segments or refuses with the typed error.

use brigade::{Array, Device, Error, HostArray, Tensor, jit};

use super::{Tol, check_on, runtime_max_binding};

/// The forced binding limit: 16 384 f32 per segment.
pub const LIMIT: u64 = 64 << 10;

/// A Vulkan and a GL device with the forced limit.
pub fn devices() -> Vec<Device> {
    runtime_max_binding("vulkan:1,gl:1", LIMIT)
        .devices()
        .to_vec()
}

/// Odd sizes (tails shorter than a segment, rows not a multiple of 4): 77 357 f32, 302 KiB.
pub const ODD: [usize; 2] = [301, 257];
/// Rows a multiple of 4 (the `vec4` paths): 33 280 f32, 130 KiB.
pub const VEC: [usize; 2] = [128, 260];

/// `check_on` over the forced-limit devices, also checking that the program really binds
/// segments (more dispatches than kernels of the unsegmented program would need).
pub fn check_segmented<F>(f: F, args: &[Array], tol: Tol) -> Vec<HostArray>
where
    F: Fn(&[Tensor]) -> Vec<Tensor> + Clone,
{
    let devs = devices();
    let program = jit(f.clone()).program(args, &devs[0]).unwrap();
    assert!(
        program.launches.iter().any(|l| !l.views.is_empty())
            || program
                .schedule
                .iter()
                .any(|o| matches!(o, brigade::lower::Op::Copy { .. })),
        "no segmented launch or copy in the program"
    );
    for l in &program.launches {
        for v in l.views.iter().flatten() {
            assert!(v.size <= LIMIT && v.offset % 256 == 0, "{}: {v:?}", l.label);
        }
    }
    check_on(&devs, f, args, tol)
}

/// The typed refusal of a family that does not bind segments yet.
pub fn refused(dev: &Device, f: impl Fn(&[Tensor]) -> Vec<Tensor>, args: &[Array], family: &str) {
    match jit(f).on(dev).call(args) {
        Err(e @ Error::OverLimit { .. }) => {
            let msg = e.to_string();
            let Error::OverLimit {
                limit, limit_name, ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(*limit, LIMIT, "{msg}");
            assert_eq!(*limit_name, "max_storage_buffer_binding_size", "{msg}");
            assert!(
                msg.contains(&format!("(segmented {family}: not supported yet)"))
                    && msg.contains("301, 257]")
                    && msg.contains(dev.name()),
                "{msg}"
            );
        }
        other => panic!(
            "{}: expected OverLimit for segmented {family}, got {other:?}",
            dev.name()
        ),
    }
}
