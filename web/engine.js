// brigade's exports, run in a Web Worker (worker.js) so that the page never freezes: every export
// of web/pkg is `bg.NAME(...args)` here too and resolves to the same JSON string.
//
// cancel() ends the run in flight: the worker is terminated (its wasm, devices and compiled
// programs with it), every pending call rejects with a CancelledError, and a fresh worker starts;
// the last start(...) is replayed there before the next call, so the page keeps its devices.

export class CancelledError extends Error {
  constructor() { super('cancelled'); this.name = 'CancelledError'; }
}

let worker = null;
let ready = null;
let nextId = 1;
const pending = new Map();
let lastStart = null;

function spawn() {
  worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  ready = new Promise((resolve, reject) => {
    worker.onmessage = ({ data }) => {
      if (data.ready) return resolve();
      if (data.fatal) return reject(new Error(data.fatal));
      if (data.event) {
        window.brigadeEvent?.(...data.event);
        return;
      }
      const p = pending.get(data.id);
      if (!p) return;
      pending.delete(data.id);
      if ('err' in data) p.reject(new Error(data.err)); else p.resolve(data.ok);
    };
    worker.onerror = (e) => {
      // A module worker that fails to load gives a bare Event (no message): say what to check.
      const err = new Error(`brigade worker: ${e.message ?? 'it failed to load (is web/pkg built? run web/build.sh)'}`);
      reject(err);
      for (const p of pending.values()) p.reject(err);
      pending.clear();
    };
  });
}

function post(name, args) {
  return new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    worker.postMessage({ id, name, args });
  });
}

let restarting = null;

async function call(name, args) {
  if (restarting) await restarting;
  await ready;
  if (name === 'start') lastStart = args;
  return post(name, args);
}

/** Load the wasm in a fresh worker (the page's `init()`). */
export default async function init() {
  if (!worker) spawn();
  await ready;
}

/** Stop whatever runs now; the devices of the last start() are opened again in a new worker. */
export async function cancel() {
  if (!worker) return;
  worker.terminate();
  const err = new CancelledError();
  for (const p of pending.values()) p.reject(err);
  pending.clear();
  spawn();
  restarting = (async () => {
    await ready;
    if (lastStart) await post('start', lastStart);
  })().finally(() => { restarting = null; });
  await restarting;
}

/** Calls in flight (0 when idle). */
export const inFlight = () => pending.size;

// (`then` is left out so that the proxy is never taken for a promise.)
export const bg = new Proxy({}, { get: (_, name) => (name === 'then' ? undefined : (...args) => call(name, args)) });
