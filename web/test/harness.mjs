// What the page's browser tests (browser.mjs, cards.mjs) share: serve web/ on 127.0.0.1, launch
// Debian's headless Chromium with WebGPU, open pages that collect console errors, count checks,
// and end the process with the verdict.
//
//   import { runBrowserTest, openPage, SHOTS, DEVICES } from './harness.mjs';
//   runBrowserTest('topics test', async ({ base, browser, log, check }) => { … });

import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { serve } from '../serve.mjs';
import { FLAGS, chromiumPath } from './chromium.mjs';

/** The folder served (web/), where screenshots go, and how many devices the page opens. */
export const WEB = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const SHOTS = path.join(WEB, 'screenshots');
export const DEVICES = Number(process.env.BRIGADE_WEB_DEVICES ?? 2);
export const DESKTOP = { width: 1200, height: 900 };
export const PHONE = { width: 390, height: 844 };

/** A new page at `url` whose console errors and warnings and uncaught exceptions go to `log`. */
export async function openPage(browser, url, log, viewport = DESKTOP) {
  const page = await browser.newPage({ viewport });
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') log.push(`[console.${m.type()}] ${m.text()}`);
  });
  page.on('pageerror', (e) => log.push(`[pageerror] ${e.message}`));
  await page.goto(url);
  return page;
}

/** Serve web/, launch Chromium, run `body({ base, browser, log, check })`, close both, print the
 * tally as "`name`: P passed, F failed" and exit non-zero if any check failed or `body` threw. */
export async function runBrowserTest(name, body) {
  const t0 = Date.now();
  let passed = 0;
  let failed = 0;
  const check = (what, ok, detail = '') => {
    if (ok) {
      passed++;
      console.log(`  ok   ${what}`);
    } else {
      failed++;
      console.log(`  FAIL ${what}${detail ? `: ${String(detail).slice(0, 4000)}` : ''}`);
    }
    return ok;
  };
  const log = [];
  let server;
  let browser;
  try {
    server = await serve(WEB, 0);
    const base = `http://127.0.0.1:${server.address().port}`;
    const exe = chromiumPath();
    browser = await chromium.launch({ executablePath: exe, headless: true, args: FLAGS, timeout: 120_000 });
    console.log(`serving ${WEB} at ${base}; Chromium ${browser.version()} (${exe})`);
    await body({ base, browser, log, check });
  } catch (e) {
    failed++;
    console.log(`  FAIL ${e.stack ?? e.message ?? e}`);
  } finally {
    await browser?.close();
    server?.close();
  }
  if (log.length) console.log(`\nbrowser console:\n  ${log.slice(0, 40).join('\n  ')}`);
  console.log(`\nscreenshots in ${SHOTS}; ${((Date.now() - t0) / 1000).toFixed(0)} s in all`);
  console.log(`${name}: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
