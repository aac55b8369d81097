// A parked cluster as a user sees it, at the default sidebar width, light and dark: its card's line ("parked 2 min ·
// 9.0 GiB kept in host memory · the next cell that sends it work resumes it") and the status bar's "· parked" for
// the notebook in front. The record is written here as a kernel whose cluster is parked writes it, for the kernel
// of the notebook this page opened. Then the card's Park parks the notebook's own cluster (simulated GPUs) and its
// Resume takes it back, through the kernel; each says on the card the line the kernel said (a silent request's line
// reaches no cell).
// Usage: node parked_view.mjs BASE_URL TOKEN NOTEBOOK RUNTIME_DIR FACTS_JSON. Screenshots: $ARTIFACTS/parked-*.png.
import fs from 'node:fs';
import path from 'node:path';
import { launch, openNotebook, setTheme, steadyScreenshot } from './chromium.mjs';

const [base, token, notebook, runtime, factsJson] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
const CLUSTER = 'gpu';
const GIB = 1024 ** 3;
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[parked] ${message}`);

function writeRecord(kernelId) {
  const now = Date.now() / 1000;
  const record = {
    name: CLUSTER, scheduler_address: 'tcp://127.0.0.1:8786', dashboard_url: null, kind: 'gpu', workers: 2,
    gpus: ['0', '1'], pid: process.pid, kernel_id: kernelId, started_at: now, version: 6, members: [],
    facts: JSON.parse(factsJson), connection_file: `kernel-${kernelId}.json`, host: null,
    parked: { since: now - 120, bytes: 9 * GIB, workers: 2 }
  }; // prettier-ignore
  const file = path.join(runtime, `gpu-magics-cluster-${process.pid}-${CLUSTER}.json`);
  fs.writeFileSync(file, JSON.stringify(record), { mode: 0o600 });
  return file;
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  try {
    await openNotebook(page, base, token, notebook);
    await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
      timeout: 120000
    });
    await page.evaluate(async () => {
      await window.jupyterapp.restored;
      await window.jupyterapp.commands.execute('gpu-magics:open');
    });
    const kernelId = await page.evaluate(() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id);
    const recordFile = writeRecord(kernelId);
    step(`record written for kernel ${kernelId.slice(0, 8)}`);
    const width = await page.evaluate(() => document.querySelector('#gpu-magics-panel').getBoundingClientRect().width);
    if (width > 300) problems.push(`the panel is ${width} px wide: not the default sidebar width`);
    const line = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"] .jp-GpuMagics-parked`);
    try {
      await line.waitFor({ timeout: 60000 });
    } catch (error) {
      const reply = await page.evaluate(
        async t => (await fetch(`/gpu-magics/api/clusters?token=${t}`)).text(),
        token
      );
      throw new Error(`no parked line on the card; the server lists: ${reply.slice(0, 1500)}`);
    }
    const said = (await line.textContent()) || '';
    step(`card: ${said}`);
    if (said !== 'parked 2 min \u00b7 9.0 GiB kept in host memory \u00b7 the next cell that sends it work resumes it') {
      problems.push(`the card's line reads "${said}"`);
    }
    const item = page.locator('.jp-GpuMagics-statusItem');
    await page.waitForFunction(
      () => /\u00b7 parked$/.test(document.querySelector('.jp-GpuMagics-statusItem')?.textContent ?? ''),
      null,
      { timeout: 30000 }
    );
    const tip = (await item.getAttribute('title')) || '';
    step(`status bar: ${await item.textContent()} | ${tip.split('\n\n')[1] ?? ''}`);
    if (!tip.includes(`Cluster '${CLUSTER}' is parked (2 min): its 2 workers gave their GPUs back, 9.0 GiB kept`)) {
      problems.push(`the status bar's tooltip reads "${tip}"`);
    }
    const card = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
    for (const theme of ['light', 'dark']) {
      await setTheme(page, theme);
      const over = await page.evaluate(() => {
        const panel = document.querySelector('#gpu-magics-panel').getBoundingClientRect();
        return Array.from(document.querySelectorAll('.jp-GpuMagics-parked'))
          .filter(node => node.getBoundingClientRect().right > panel.right + 0.5)
          .map(node => node.textContent);
      });
      if (over.length) problems.push(`${theme}: past the panel's width: ${over.join('; ')}`);
      await card.scrollIntoViewIfNeeded();
      await steadyScreenshot(card, { path: path.join(artifacts, `parked-card-${theme}.png`) });
      await steadyScreenshot(item, { path: path.join(artifacts, `parked-status-${theme}.png`) });
    }
    await setTheme(page, 'light');
    fs.unlinkSync(recordFile);
    await card.waitFor({ state: 'detached', timeout: 60000 });
    step('starting the notebook\'s own cluster');
    await page.evaluate(() => {
      void window.jupyterapp.commands.execute('notebook:run-all-cells');
    });
    const live = page.locator('.jp-GpuMagics-cluster[data-cluster="live"]');
    const park = live.locator('.jp-GpuMagics-parkButtons button', { hasText: 'Park' });
    try {
      await park.waitFor({ timeout: 180000 });
      await page.waitForFunction(
        () => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle',
        null,
        { timeout: 120000 }
      );
    } catch (error) {
      const outputs = await page.locator('.jp-OutputArea-output').allTextContents();
      throw new Error(`the live card never offered Park; the notebook printed: ${outputs.join(' | ').slice(0, 2000)}`);
    }
    const liveLine = live.locator('.jp-GpuMagics-parked');
    const liveSaid = live.locator('.jp-GpuMagics-said');
    await park.click();
    await liveLine.waitFor({ timeout: 60000 });
    await liveSaid.waitFor({ timeout: 60000 });
    const parkedLine = (await liveLine.textContent()) || '';
    const parkSaid = (await liveSaid.textContent()) || '';
    step(`its card: ${parkedLine} | said: ${parkSaid}`);
    if (!/^parked \d+ s \u00b7 .+ kept in host memory \u00b7 the next cell that sends it work resumes it$/.test(parkedLine)) {
      problems.push(`the live card's line reads "${parkedLine}"`);
    }
    if (!parkSaid.startsWith("parked 2 workers of 'live' (simulated GPUs")) {
      problems.push(`after Park the card says "${parkSaid}"`);
    }
    await page.waitForFunction(
      () => /\u00b7 parked$/.test(document.querySelector('.jp-GpuMagics-statusItem')?.textContent ?? ''),
      null,
      { timeout: 30000 }
    );
    for (const theme of ['light', 'dark']) {
      await setTheme(page, theme);
      await live.scrollIntoViewIfNeeded();
      await steadyScreenshot(live, { path: path.join(artifacts, `parked-live-card-${theme}.png`) });
    }
    await setTheme(page, 'light');
    await live.locator('.jp-GpuMagics-parkButtons button', { hasText: 'Resume' }).click();
    await liveLine.waitFor({ state: 'detached', timeout: 60000 });
    await page.waitForFunction(
      () => !/parked/.test(document.querySelector('.jp-GpuMagics-statusItem')?.textContent ?? ''),
      null,
      { timeout: 30000 }
    );
    await park.waitFor({ timeout: 60000 }); // Park again in its place
    const resumeSaid = (await liveSaid.textContent()) || '';
    if (!resumeSaid.startsWith("resumed 2 workers of 'live' (simulated GPUs")) {
      problems.push(`after Resume the card says "${resumeSaid}"`);
    }
    const failed = await live.locator('.jp-GpuMagics-error').count();
    if (failed) problems.push(`after Resume the card says "${await live.locator('.jp-GpuMagics-error').textContent()}"`);
    await steadyScreenshot(live, { path: path.join(artifacts, 'parked-live-resumed-light.png') });
    step(`Resume took it back: the card and the status bar no longer say parked | said: ${resumeSaid}`);
  } finally {
    await browser.close();
  }
  if (errors.length) problems.push(`page errors: ${errors.join('; ')}`);
  if (problems.length) {
    console.log(`[parked] FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  step('the parked cluster reads right');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
