//! The page's side: its clock, its event hook (`brigadeEvent`) and a panic hook that reports to it.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen::prelude::*;

#[cfg(target_arch = "wasm32")]
use super::json::json_str;

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn perf_now() -> f64;
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(msg: &str);
    // `catch`: a page without the hook (or one that throws) must not unwind through wasm.
    #[wasm_bindgen(catch, js_name = brigadeEvent)]
    fn brigade_event(kind: &str, detail: &str) -> std::result::Result<(), JsValue>;
}

/// Milliseconds on the page's clock (`performance.now()`); natively, since the first call.
pub(super) fn now() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        perf_now()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
            * 1e3
    }
}

/// Tell the page something happened (a lane lit up, a device finished). Natively: nothing.
pub(super) fn emit(kind: &str, detail: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        let _ = brigade_event(kind, detail);
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (kind, detail);
    }
}

/// Route panics to the console and the page (once), instead of an opaque `unreachable` trap.
/// A small hook of our own: it is all `console_error_panic_hook` would do here.
pub(super) fn install_panic_hook() {
    #[cfg(target_arch = "wasm32")]
    {
        use std::sync::Once;
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                let msg = format!("brigade panicked: {info}");
                console_error(&msg);
                let _ = brigade_event("panic", &json_str(&msg));
            }));
        });
    }
}
