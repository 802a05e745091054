// What the browser test and the bench share: where Chromium is and the flags it runs with.

import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export const FLAGS = [
  '--no-sandbox', '--enable-unsafe-webgpu',
  // Stay off the network and keep the profile fresh (playwright gives a temporary user-data-dir).
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--no-first-run', '--disable-quic',
];

/** CHROMIUM, else Debian's /usr/lib/chromium/chromium, else `chromium` on PATH. */
export function chromiumPath() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  if (existsSync('/usr/lib/chromium/chromium')) return '/usr/lib/chromium/chromium';
  try {
    return execFileSync('which', ['chromium'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error('no Chromium found: apt-get install -y chromium (or set CHROMIUM=/path/to/chromium)');
  }
}
