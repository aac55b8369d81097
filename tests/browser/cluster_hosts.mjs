// A cluster on two hosts in the side panel, as a user sees it: a notebook attaches to a scheduler that Dask's CLI
// started, with workers on 127.0.0.2 and 127.0.0.3 (two simulated GPUs each); the panel lists each host's GPUs
// from the workers' own reports, and GPU memory by notebook from their self-reports.
// Usage: node cluster_hosts.mjs BASE_URL TOKEN NOTEBOOK_PATH HOST_A HOST_B
import fs from 'node:fs';
import path from 'node:path';
import { launch, steadyScreenshot } from './chromium.mjs';

const [base, token, notebook, hostA, hostB] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
const CLUSTER = process.env.CLUSTER_NAME || 'remote';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[hosts] ${message}`);

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  const shot = name => steadyScreenshot(page.locator('#gpu-magics-panel'), { path: path.join(artifacts, `${name}.png`) });
  try {
    await page.goto(`${base}lab/tree/${notebook}?token=${token}`);
    await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
      timeout: 120000
    });
    await page.evaluate(async () => {
      await window.jupyterapp.restored;
      await window.jupyterapp.commands.execute('gpu-magics:open');
    });
    await page.waitForFunction(
      () => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle',
      null,
      { timeout: 120000 }
    );
    step('attaching from the notebook');
    await page.evaluate(() => {
      void window.jupyterapp.commands.execute('notebook:run-all-cells');
    });
    const row = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
    await row.waitFor({ timeout: 180000 });
    await page.waitForFunction(
      ([name, hosts]) => {
        const view = document.querySelector(`.jp-GpuMagics-cluster[data-cluster="${name}"]`);
        if (!view) return false;
        const shown = Array.from(view.querySelectorAll('.jp-GpuMagics-host')).map(node => node.textContent);
        const gpus = view.querySelectorAll('.jp-GpuMagics-memberGpu[data-gpu-label]').length;
        return hosts.every(host => shown.includes(host)) && gpus === 4;
      },
      [CLUSTER, [hostA, hostB]],
      { timeout: 60000 }
    );
    const labels = await row
      .locator('.jp-GpuMagics-memberGpu[data-gpu-label]')
      .evaluateAll(nodes => nodes.map(node => node.getAttribute('data-gpu-label')).sort());
    const expected = [hostA, hostB].flatMap(host => [`${host} \u00b7 GPU 0`, `${host} \u00b7 GPU 1`]).sort();
    if (JSON.stringify(labels) !== JSON.stringify(expected)) {
      throw new Error(`the panel lists ${JSON.stringify(labels)}, expected ${JSON.stringify(expected)}`);
    }
    step(`both hosts' GPUs listed: ${labels.join(', ')}`);
    step('waiting for memory by notebook from the workers\' own reports');
    await page.waitForFunction(
      () => document.querySelectorAll('.jp-GpuMagics-holder[data-source="self-report"]').length >= 2,
      null,
      { timeout: 60000 }
    );
    const holders = await page.locator('.jp-GpuMagics-holders').textContent();
    for (const host of [hostA, hostB]) {
      if (!holders.includes(host)) {
        throw new Error(`memory by notebook does not name ${host}: ${holders}`);
      }
    }
    if (!holders.includes(notebook)) {
      throw new Error(`memory by notebook does not name the notebook ${notebook}: ${holders}`);
    }
    await shot('hosts-light');
    await page.evaluate(() =>
      window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Dark' })
    );
    await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'false', null, { timeout: 30000 });
    await page.waitForTimeout(2500);
    await shot('hosts-dark');
    if (errors.length) {
      throw new Error(`errors in the page:\n${errors.join('\n')}`);
    }
    step('passed');
  } catch (error) {
    await page.screenshot({ path: path.join(artifacts, 'hosts-failure.png') }).catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(`[hosts] FAILED: ${error.stack || error}`);
  process.exit(1);
});
