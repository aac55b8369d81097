// The side panel end to end: open it, watch the fake GPUs move, start a CPU cluster from a notebook,
// see it listed, stop it from the panel, see it gone. Screenshots go to $ARTIFACTS (test-artifacts/).
// Usage: node e2e.mjs BASE_URL TOKEN NOTEBOOK_PATH
import fs from 'node:fs';
import path from 'node:path';
import { launch } from './chromium.mjs';

const [base, token, notebook] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });

const CLUSTER = process.env.CLUSTER_NAME || 'e2e';
const step = message => console.log(`[e2e] ${message}`);

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  page.on('console', message => {
    if (message.type() === 'error' && /gpu-magics/i.test(message.text())) {
      errors.push(message.text());
    }
  });
  const shot = name => page.screenshot({ path: path.join(artifacts, `${name}.png`) });
  try {
    step('loading JupyterLab');
    await page.goto(`${base}lab/tree/${notebook}?token=${token}`);
    await page.waitForSelector('#main', { timeout: 120000 });
    await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
      timeout: 120000
    });

    step('opening the panel');
    await page.evaluate(async () => {
      await window.jupyterapp.restored; // else restoring the layout may hide the panel again
      await window.jupyterapp.commands.execute('gpu-magics:open');
    });
    const cards = page.locator('.jp-GpuMagics-card');
    await cards.first().waitFor({ timeout: 60000 });
    const count = await cards.count();
    if (count !== 2) {
      throw new Error(`expected 2 fake GPU cards, saw ${count}`);
    }
    const util = page.locator('.jp-GpuMagics-card[data-gpu="0"] [data-metric="util"] .jp-GpuMagics-value');
    const first = await util.textContent();
    await page.waitForFunction(
      previous => {
        const node = document.querySelector(
          '.jp-GpuMagics-card[data-gpu="0"] [data-metric="util"] .jp-GpuMagics-value'
        );
        return node && node.textContent !== previous;
      },
      first,
      { timeout: 30000 }
    );
    step(`GPU 0 utilization moved from ${first} to ${await util.textContent()}`);
    await shot('1-panel-live');

    step('starting a CPU cluster from the notebook');
    await page.waitForSelector('.jp-NotebookPanel', { timeout: 60000 });
    await page.waitForFunction(
      () => {
        const widget = window.jupyterapp.shell.currentWidget;
        return widget?.sessionContext?.session?.kernel?.status === 'idle';
      },
      null,
      { timeout: 120000 }
    );
    // Do not wait for the command: it resolves only when the cells finish.
    await page.evaluate(() => {
      void window.jupyterapp.commands.execute('notebook:run-all-cells');
    });
    const row = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
    await row.waitFor({ timeout: 180000 });
    await page.waitForFunction(
      name => {
        const button = Array.from(
          document.querySelectorAll(`.jp-GpuMagics-cluster[data-cluster="${name}"] button`)
        ).find(b => b.textContent === 'Stop');
        return button && !button.disabled;
      },
      CLUSTER,
      { timeout: 60000 }
    );
    const text = await row.textContent();
    if (!text.includes(notebook)) {
      throw new Error(`the cluster row does not name its notebook ${notebook}: ${text}`);
    }
    step(`listed: ${text}`);
    await shot('2-cluster-listed');

    step('stopping it from the panel');
    await row.locator('button', { hasText: 'Stop' }).click();
    await page.locator('.jp-Dialog button.jp-mod-warn').click();
    await row.waitFor({ state: 'detached', timeout: 120000 });
    await page.waitForSelector('.jp-GpuMagics-clusters .jp-GpuMagics-empty', { timeout: 30000 });
    step('the cluster is gone');
    await shot('3-cluster-stopped');

    // The panel uses only JupyterLab's CSS variables: look at it in the dark theme too.
    await page.evaluate(() =>
      window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Dark' })
    );
    await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'false', null, {
      timeout: 30000
    });
    await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 30000 });
    await cards.first().waitFor();
    await page.waitForTimeout(1500); // let a few samples arrive in the new theme
    await shot('4-dark-theme');

    if (errors.length) {
      throw new Error(`errors in the page:\n${errors.join('\n')}`);
    }
    step('passed');
  } catch (error) {
    await shot('failure').catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(`[e2e] FAILED: ${error.stack || error}`);
  process.exit(1);
});
