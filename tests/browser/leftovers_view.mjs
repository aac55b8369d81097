// The side panel at the default sidebar width, light and dark: under the clusters, what a kernel that has ended
// left on a GPU ("left by a kernel that has ended: 2 processes hold 7.0 GiB on GPU 1") with End them; on the card of
// the cluster whose kernel holds memory on an idle GPU, the idle-hold line; the status bar's short suffix. Then End
// them, confirmed, ends the processes and the panel says so.
// Usage: node leftovers_view.mjs BASE_URL TOKEN "PID PID". Screenshots go to $ARTIFACTS as leftovers-*.png.
import fs from 'node:fs';
import path from 'node:path';
import { launch, setTheme, steadyScreenshot } from './chromium.mjs';

const [base, token, pidList] = process.argv.slice(2);
const pids = pidList.split(' ').map(Number);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[leftovers] ${message}`);

/** The panel as it shows, scrolled so that the clusters and what is under them are in view. */
async function panelShot(page, name) {
  await page.evaluate(() => {
    const panel = document.querySelector('#gpu-magics-panel');
    const clusters = panel.querySelector('.jp-GpuMagics-clusters');
    panel.scrollTop = clusters.offsetTop - 60;
  });
  const box = await page.locator('#gpu-magics-panel').boundingBox();
  await page.screenshot({ path: path.join(artifacts, `${name}.png`), clip: box });
}

/** Lines of the panel's leftovers and idle-hold nodes that run past the panel's width. */
function overflowing(page) {
  return page.evaluate(() => {
    const panel = document.querySelector('#gpu-magics-panel').getBoundingClientRect();
    return Array.from(document.querySelectorAll('.jp-GpuMagics-leftovers *, .jp-GpuMagics-idleHold'))
      .filter(node => node.getBoundingClientRect().right > panel.right + 0.5 || node.scrollWidth > node.clientWidth + 1)
      .map(node => `${node.className}: ${node.textContent.slice(0, 60)}`);
  });
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  try {
    await page.goto(`${base}lab?token=${token}`);
    await page.waitForSelector('#main', { timeout: 120000 });
    await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
      timeout: 120000
    });
    await page.evaluate(async () => {
      await window.jupyterapp.restored;
      await window.jupyterapp.commands.execute('gpu-magics:open');
    });
    const width = await page.evaluate(() => document.querySelector('#gpu-magics-panel').getBoundingClientRect().width);
    step(`panel width ${Math.round(width)} px`);
    if (width > 300) problems.push(`the panel is ${width} px wide: not the default sidebar width`);
    const leftover = page.locator('.jp-GpuMagics-leftover');
    await leftover.first().waitFor({ timeout: 60000 });
    const line = (await leftover.locator('.jp-GpuMagics-leftoverLine').textContent()) || '';
    const listed = (await leftover.locator('.jp-GpuMagics-leftoverProcesses').textContent()) || '';
    step(`leftover: ${line} | ${listed}`);
    if (line !== 'Left by a kernel that has ended: 2 processes hold 7.0 GiB on GPU 1') {
      problems.push(`the leftover line reads "${line}"`);
    }
    if (!pids.every(pid => listed.includes(`pid ${pid} `))) problems.push(`the processes listed are "${listed}"`);
    const hold = page.locator('.jp-GpuMagics-cluster[data-cluster="train"] .jp-GpuMagics-idleHold');
    await hold.waitFor({ timeout: 60000 });
    const holdText = (await hold.textContent()) || '';
    step(`idle hold: ${holdText}`);
    if (!/^This notebook holds 11\.0 GiB on GPU 0, idle for \d+ s: free cached memory \(%gpucluster free\) or stop the cluster/.test(holdText)) {
      problems.push(`the idle-hold line reads "${holdText}"`);
    }
    await page.waitForFunction(
      () => /\u00b7 1 notebook holds idle GPUs$/.test(document.querySelector('.jp-GpuMagics-statusItem')?.textContent ?? ''),
      null,
      { timeout: 30000 }
    );
    const item = page.locator('.jp-GpuMagics-statusItem');
    step(`status bar: ${await item.textContent()}`);
    for (const theme of ['light', 'dark']) {
      await setTheme(page, theme);
      const over = await overflowing(page);
      if (over.length) problems.push(`${theme}: past the panel's width: ${over.join('; ')}`);
      await panelShot(page, `leftovers-panel-${theme}`);
      await steadyScreenshot(item, { path: path.join(artifacts, `leftovers-status-${theme}.png`) });
    }
    await setTheme(page, 'light');
    await leftover.locator('button', { hasText: 'End them' }).click();
    const dialog = page.locator('.jp-Dialog');
    await dialog.waitFor({ timeout: 30000 });
    step(`dialog: ${(await dialog.locator('.jp-Dialog-header').textContent()) || ''}`);
    await dialog.screenshot({ path: path.join(artifacts, 'leftovers-confirm-light.png') });
    await dialog.locator('button.jp-mod-accept').click();
    const outcome = page.locator('.jp-GpuMagics-leftoversOutcome');
    await outcome.waitFor({ timeout: 60000 });
    const said = (await outcome.textContent()) || '';
    step(`outcome: ${said}`);
    if (!said.startsWith('Ended pid ') || !pids.every(pid => said.includes(`pid ${pid}`))) {
      problems.push(`after End them the panel says "${said}"`);
    }
    await page.waitForFunction(() => document.querySelectorAll('.jp-GpuMagics-leftover').length === 0, null, {
      timeout: 30000
    });
    await panelShot(page, 'leftovers-ended-light');
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[leftovers] FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  step('the leftovers and the idle hold read right');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
