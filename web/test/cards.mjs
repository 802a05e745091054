// The Topics tab's browser test: serve web/, open ?test=1&only=none&cards=1 in headless Chromium
// with WebGPU, let cards.js run every card (window.brigadeCards), and check: every card ran real
// kernels on WebGPU and verified its result; the real error texts and the random-key verdicts
// are shown; both languages cover every new string; the program listings open; the AI-scenario
// buttons lead to their demos. Screenshots of the tab (zh, en; desktop and 390 px wide) go to
// web/screenshots/.
//
//   node web/test/cards.mjs          (after web/build.sh; scripts/test.sh runs it as a web step)
//
// Environment: CHROMIUM, BRIGADE_WEB_DEVICES (default 2), BRIGADE_WEB_TIMEOUT_S (default 600).

import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { runBrowserTest, openPage, SHOTS, DEVICES, DESKTOP, PHONE } from './harness.mjs';

const TIMEOUT_S = Number(process.env.BRIGADE_WEB_TIMEOUT_S ?? 600);
const CARDS = ['debug', 'prints', 'planner', 'random', 'placement', 'model'];

async function main({ base, browser, log, check }) {
  const page = await openPage(browser, `${base}/?test=1&only=none&cards=1&devices=${DEVICES}`, log);

  // 1. Every card runs (cards.js runs them in turn once the devices are open).
  const started = Date.now();
  let c;
  let seen = '';
  while (true) {
    c = await page.evaluate(() => ({ cards: window.brigadeCards, page: window.brigadeStatus }));
    if (c.cards?.done || (c.page?.panics ?? []).length) break;
    const now = Object.keys(c.cards?.cards ?? {}).join(', ');
    if (now !== seen) { seen = now; console.log(`  … ${((Date.now() - started) / 1000).toFixed(0)} s, cards done: ${now || 'none yet'}`); }
    if (Date.now() - started > TIMEOUT_S * 1000) throw new Error(`the cards did not finish within ${TIMEOUT_S} s: ${JSON.stringify(c)}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
  const s = c.cards;
  const ps = c.page;
  check('no panic in the wasm', (ps.panics ?? []).length === 0, JSON.stringify(ps.panics));
  check(`${DEVICES} WebGPU devices`, ps.webgpu && ps.devices === DEVICES, JSON.stringify({ webgpu: ps.webgpu, devices: ps.devices, fallback: ps.fallback }));
  check('no card reported an error', s.errors.length === 0, JSON.stringify(s.errors));
  console.log('\nper-card timings (ms):');
  for (const name of CARDS) {
    const st = s.cards[name] ?? {};
    check(`card ${name}: ran real kernels on WebGPU, verified against the CPU reference`,
      st.ran === true && st.ok === true && st.realKernels === true && st.devices === DEVICES, JSON.stringify(st));
    console.log(`    ${name.padEnd(10)} ${String(Math.round(st.ms ?? NaN)).padStart(7)} ms  ${st.dispatches} dispatches`);
  }
  const mark = await page.textContent('#mark-topics');
  check('the tab is marked ✓', mark === '✓', mark);

  // 2. What the cards show: brigade's real messages, one print line per device, both noises.
  const shown = await page.evaluate(() => ({
    debug: document.getElementById('c-debug').textContent,
    prints: document.querySelector('#c-prints pre')?.textContent ?? '',
    rand: [...document.querySelectorAll('#c-rand .cards-verdict')].map((e) => e.className),
    gantt: document.querySelectorAll('#c-mp svg rect').length,
    listings: document.querySelectorAll('[data-programs] details.programs-box').length,
    placeholders: document.querySelectorAll('[data-programs]').length,
  }));
  check('the debugging card shows IndivisibleSplit\'s real text', /cannot be split evenly/.test(shown.debug), shown.debug.slice(0, 400));
  check('… and TracedValue\'s, with cond as the fix', /TracedValue/.test(shown.debug) && /cond/.test(shown.debug), shown.debug.slice(0, 600));
  const lines = shown.prints.split('\n').filter(Boolean);
  check(`debug_print: one line per device, tagged webgpu:d i=d`, lines.length === DEVICES
    && lines.every((l, d) => l.startsWith(`[webgpu:${d} i=${d}]`)), shown.prints);
  check('random keys: same key → identical (✗), split and fold_in → distinct (✓)',
    shown.rand.length === 3 && /bad/.test(shown.rand[0]) && /ok/.test(shown.rand[1]) && /ok/.test(shown.rand[2]), JSON.stringify(shown.rand));
  check('model parallel: measured and predicted timelines drawn', shown.gantt >= 2 * 4 * 2, String(shown.gantt));
  check('every demo has its program listing (Rust and JAX)', shown.listings === shown.placeholders && shown.listings >= 15,
    `${shown.listings} of ${shown.placeholders}`);

  // 2b. The debugging card's third common error (one seed on every device) links to the random
  //     card: the link unfolds it and scrolls to it, on the Topics tab.
  await page.click('.tabs button[data-tab="topics"]');
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.click('#c-debug-to-rand');
  await page.waitForTimeout(300);
  const jump = await page.evaluate(() => {
    const c = document.getElementById('card-random');
    const r = c.getBoundingClientRect();
    return { open: c.open, top: r.top, h: window.innerHeight, tab: document.getElementById('tab-topics').classList.contains('active'),
      text: document.getElementById('c-debug-to-rand').textContent, ran: window.brigadeCards.cards.random?.ok };
  });
  check('the debugging card\'s third error links to the random-key card: it opens, scrolled into view',
    jump.open && jump.tab && jump.top >= -1 && jump.top < jump.h / 2 && jump.ran === true && /随机数的坑/.test(jump.text), JSON.stringify(jump));

  // 3. A listing opens, highlighted.
  await page.click('#card-random details.programs-box > summary');
  const listing = await page.evaluate(() => {
    const d = document.querySelector('#card-random details.programs-box');
    return { open: d.open, kw: d.querySelectorAll('pre.rust .kw').length, py: d.querySelectorAll('pre.py .kw').length, text: d.textContent };
  });
  check('a listing opens: Rust and Python, highlighted', listing.open && listing.kw > 3 && listing.py > 3
    && /fold_in_tensor/.test(listing.text) && /jax\.random\.split/.test(listing.text), JSON.stringify({ ...listing, text: undefined }));

  // 4. Screenshots in Chinese, the toggle, English: every new key in both languages, no key
  //    left untranslated on the page.
  mkdirSync(SHOTS, { recursive: true });
  const folds = () => page.evaluate(() => {
    const cards = [...document.querySelectorAll('#tab-topics details.cards-card')];
    return { cards: cards.length, open: cards.filter((d) => d.open).length, height: document.documentElement.scrollHeight };
  });
  const shoot = async (lang) => {
    await page.setViewportSize(DESKTOP);
    await page.waitForTimeout(150);
    const wide = await folds();
    check(`desktop (${lang}): every Topics card is unfolded`, wide.cards === CARDS.length + 1 && wide.open === wide.cards, JSON.stringify(wide));
    await page.screenshot({ path: path.join(SHOTS, `topics-${lang}.png`), fullPage: true });
    await page.setViewportSize(PHONE);
    await page.waitForTimeout(150);
    // A phone starts with the cards folded (titles and ✓ marks only): a short page.
    await page.evaluate(() => window.scrollTo(0, 0));
    const narrow = await folds();
    check(`390 px wide (${lang}): the cards are folded, the Topics page is ${narrow.height} px tall (under 2500)`,
      narrow.open === 0 && narrow.height < 2500, JSON.stringify(narrow));
    const marks = await page.$$eval('#tab-topics details.cards-card > summary .mark', (m) => m.map((e) => e.textContent));
    check(`390 px wide (${lang}): each folded card shows its verdict`, marks.filter((m) => m === '✓').length === CARDS.length, JSON.stringify(marks));
    await page.screenshot({ path: path.join(SHOTS, `topics-${lang}-390.png`), fullPage: true });
    // Unfolded, every card's content fits the phone's width.
    await page.$$eval('#tab-topics details.cards-card', (ds) => ds.forEach((d) => { d.open = true; }));
    await page.waitForTimeout(150);
    // The tab's own content (the tab bar above it is the page's).
    const overflow = await page.evaluate(() => {
      const right = [...document.querySelectorAll('#tab-topics *')].filter((e) => !e.closest('svg') && !e.parentElement.closest('table, pre'))
        .map((e) => e.getBoundingClientRect().right);
      return Math.max(0, ...right) - window.innerWidth;
    });
    check(`390 px wide (${lang}): the unfolded Topics cards do not overflow sideways`, overflow <= 1, `${overflow.toFixed(0)}px`);
    await page.screenshot({ path: path.join(SHOTS, `topics-${lang}-390-open.png`), fullPage: true });
    await page.setViewportSize(DESKTOP);
  };
  const keys = s.keys;
  check('every new string exists in both languages', keys.zh.length === keys.en.length
    && keys.zh.every((k) => keys.en.includes(k)), JSON.stringify(keys.zh.filter((k) => !keys.en.includes(k))));
  const textOf = () => page.evaluate(() => ({
    tab: document.querySelector('.tabs button[data-tab="topics"]').textContent,
    body: document.getElementById('tab-topics').innerText,
    lang: window.brigadeCards.lang,
  }));
  const zh = await textOf();
  check('Chinese: the tab and its cards', zh.tab.includes('专题') && /调试与降级/.test(zh.body) && /模型并行/.test(zh.body)
    && zh.lang === 'zh' && !/cards\.(?!rs\b)[a-z]/.test(zh.body), zh.body.slice(0, 300));
  await shoot('zh');
  await page.click('#lang');
  const en = await textOf();
  const hanInEnglish = (en.body.match(/[\u4e00-\u9fff]+/g) ?? []);
  check('English: the tab, its cards and results switch language', en.tab.includes('Topics') && /Debugging and fallback/.test(en.body)
    && /Model parallelism/.test(en.body) && /every device drew its own noise/.test(en.body) && en.lang === 'en'
    && !/cards\.(?!rs\b)[a-z]/.test(en.body) && hanInEnglish.length === 0, JSON.stringify(hanInEnglish.slice(0, 10)));
  await shoot('en');
  await page.click('#lang');
  check('… and back to Chinese', (await textOf()).body.includes('每台设备的噪声各不相同'));

  // 5. An AI-scenario button opens its demo: on a phone, the layer-sharded one unfolds the
  //    model-parallel card and runs it; then the Hands-on matmul.
  await page.setViewportSize(PHONE);
  await page.waitForTimeout(150);
  const runsBefore = await page.evaluate(() => window.brigadeCards.cards.model.ms);
  await page.click('#card-ai > summary');
  await page.click('#c-ai-llm');
  await page.waitForFunction((ms) => window.brigadeCards.cards.model.ms !== ms && !document.getElementById('c-mp-run').disabled, runsBefore, { timeout: 120_000 });
  const llm = await page.evaluate(() => ({ open: document.getElementById('card-model').open, ok: window.brigadeCards.cards.model.ok }));
  check('on a phone, the layer-sharding scenario unfolds the model-parallel card and runs it (verified)', llm.open && llm.ok === true, JSON.stringify(llm));
  await page.setViewportSize(DESKTOP);
  // The Hands-on tab and its matmul run.
  await page.click('.tabs button[data-tab="topics"]');
  await page.click('#c-ai-mm');
  const opened = await page.evaluate(() => document.getElementById('tab-handson').classList.contains('active'));
  check('an AI-scenario button opens its demo', opened);
  await page.waitForFunction(() => !document.getElementById('h-run2').disabled, null, { timeout: 120_000 });
  await page.close();
}

runBrowserTest('topics test', main);
