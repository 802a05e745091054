//! Transfers through the public API: reading device data into memory the caller owns.

mod common;

use brigade::{Array, Error, Tensor, jit, pmap};
use common::*;

/// `Array::read_into` fills a caller's slice (reused across reads) with exactly what `to_vec`
/// reads: every dtype, NaN/inf/-0 included, on every GPU device, for host, device and sharded
/// arrays; a wrong length or element type is a typed error that leaves `out` alone.
#[test]
fn read_into_fills_a_reused_slice_like_to_vec() {
    let special = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 1.5, -2.25];
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let mut out = vec![7.0f32; 6];
        for k in 0..3 {
            let x = Array::from_vec(
                special.iter().map(|v| v * (k + 1) as f32).collect(),
                &[2, 3],
            )
            .unwrap()
            .to_device(&dev)
            .unwrap();
            let y = jit(|a: &[Tensor]| vec![&a[0] - 1.0])
                .on(&dev)
                .call(&[x])
                .unwrap();
            y[0].read_into(&mut out).unwrap();
            let want = y[0].to_vec::<f32>().unwrap();
            let same = out
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            assert!(
                same,
                "on {}: read_into {out:?}, to_vec {want:?}",
                dev.name()
            );
        }
        // i32, u32 and bool (stored as 4 bytes per element on the device).
        let i = Array::from_vec(vec![i32::MIN, -1, 0, i32::MAX], &[4])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let mut oi = vec![0i32; 4];
        i.read_into(&mut oi).unwrap();
        assert_eq!(oi, vec![i32::MIN, -1, 0, i32::MAX]);
        let u = Array::from_vec(vec![u32::MAX, 3], &[2])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let mut ou = vec![0u32; 2];
        u.read_into(&mut ou).unwrap();
        assert_eq!(ou, vec![u32::MAX, 3]);
        let b = jit(|a: &[Tensor]| vec![a[0].is_nan()])
            .on(&dev)
            .call(&[Array::from_vec(special.clone(), &[6]).unwrap()])
            .unwrap();
        let mut ob = vec![true; 6];
        b[0].read_into(&mut ob).unwrap();
        assert_eq!(
            ob,
            vec![true, false, false, false, false, false],
            "on {}",
            dev.name()
        );
        // Bad calls: typed errors naming the sizes, `out` untouched.
        let mut short = vec![9.0f32; 5];
        let e = b[0].read_into(&mut short).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DTypeMismatch {
                    op: "read_into",
                    ..
                }
            ),
            "{e:?}"
        );
        let x = Array::from_vec(special.clone(), &[6])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let e = x.read_into(&mut short).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DataLength {
                    expected: 6,
                    got: 5,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(short, vec![9.0; 5]);
        // An empty array reads into an empty slice.
        let empty = Array::from_vec(Vec::<f32>::new(), &[0, 3])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        empty.read_into::<f32>(&mut []).unwrap();
    }
    // Host and sharded arrays.
    let h = Array::from_vec(vec![1.0f32, -0.0], &[2]).unwrap();
    let mut o = vec![0.0f32; 2];
    h.read_into(&mut o).unwrap();
    assert!(o[0] == 1.0 && o[1].is_sign_negative());
    let devs = devices_with("vulkan:2");
    let s = pmap(|a: &[Tensor]| vec![&a[0] * 3.0])
        .devices(&devs)
        .call(&[Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap()])
        .unwrap();
    let mut o = vec![0.0f32; 4];
    s[0].read_into(&mut o).unwrap();
    assert_eq!(o, vec![3.0, 6.0, 9.0, 12.0]);
}

/// `Display` reads an array back and prints its values numpy-style with its dtype and placement:
/// a device array names its device, a sharded array its sharding and shows the assembled value;
/// `Debug` stays one line and reads nothing.
#[test]
fn arrays_print_their_values_and_placement() {
    let values = vec![1.5f32, -2.0, 0.25, 4.0, 8.0, -0.5];
    let want_body = "[[ 1.5, -2.0, 0.25],\n       [ 4.0,  8.0, -0.5]]";
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::from_vec(values.clone(), &[2, 3])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let info = dev.info();
        assert_eq!(
            x.to_string(),
            format!(
                "Array({want_body}, dtype=f32, device={}:{})",
                info.backend, info.index
            ),
            "on {}",
            dev.name()
        );
        assert!(!format!("{x:?}").contains('\n'), "on {}: {x:?}", dev.name());
    }
    // Two shards over the rows: the printed value is the whole array.
    let devs: Vec<_> = gpu_devices().into_iter().take(2).collect();
    if devs.len() == 2 {
        let mesh = brigade::Mesh::new(&devs, &[("rows", 2)]).unwrap();
        let sharding = brigade::NamedSharding::new(&mesh, brigade::P!["rows"]).unwrap();
        let x = Array::from_vec(values.clone(), &[2, 3]).unwrap();
        let s = brigade::device_put(&x, &sharding).unwrap();
        assert!(s.shards().is_some_and(|sh| sh.len() == 2));
        assert_eq!(
            s.to_string(),
            format!("Array({want_body}, dtype=f32, sharding={sharding})")
        );
    }
}
