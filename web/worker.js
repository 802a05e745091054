// The page's engine in a Web Worker: a second instance of brigade's wasm, so that the CPU
// reference checks and the cpu fallback never block the page's main thread.
// engine.js (on the page) sends {id, name, args}; this answers {id, ok} or {id, err}, and forwards
// brigadeEvent(kind, detail) calls from Rust as {event: [kind, detail]}.

import init, * as bg from './pkg/brigade.js';

self.brigadeEvent = (kind, detail) => postMessage({ event: [kind, detail] });

// Set the handler at once: messages that arrive while the wasm loads wait for it here.
const ready = init().then(() => postMessage({ ready: true }), (e) => {
  postMessage({ fatal: String(e?.message ?? e) });
  throw e;
});

self.onmessage = async ({ data: { id, name, args } }) => {
  try {
    await ready;
    if (typeof bg[name] !== 'function') throw new Error(`brigade has no export ${name}`);
    postMessage({ id, ok: await bg[name](...args) });
  } catch (e) {
    postMessage({ id, err: String(e?.message ?? e) });
  }
};
