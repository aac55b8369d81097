// A gateway cluster this notebook connected to (%gpucluster --gateway --connect NAME), as a user sees it in the
// notebook's card and in the side panel at the default sidebar width, light and dark: named by its short name, its
// age the cluster's own (up 2 h), not the connection's (a few seconds). The card comes from NOTEBOOK (a hand-built
// ClusterInfo), the side panel's row from a discovery record the test wrote ($CLUSTER_NAME).
// Usage: node gateway_card.mjs BASE_URL TOKEN NOTEBOOK. Screenshots go to $ARTIFACTS as gateway-*.png.
import fs from 'node:fs';
import path from 'node:path';
import { launch, openNotebook, steadyScreenshot } from './chromium.mjs';

const [base, token, notebook] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
const CLUSTER = process.env.CLUSTER_NAME;
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[gateway] ${message}`);

async function setTheme(page, theme) {
  const name = theme === 'dark' ? 'JupyterLab Dark' : 'JupyterLab Light';
  await page.evaluate(n => window.jupyterapp.commands.execute('apputils:change-theme', { theme: n }), name);
  await page.waitForFunction(light => document.body.dataset.jpThemeLight === light, String(theme !== 'dark'), {
    timeout: 60000
  });
  await page.waitForTimeout(1000);
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  try {
    await openNotebook(page, base, token, notebook);
    await page.evaluate(() => void window.jupyterapp.commands.execute('notebook:run-all-cells'));
    const card = page.locator('.jp-OutputArea-output .gpu-magics-cluster').first();
    await card.waitFor({ timeout: 120000 });
    const text = (await card.textContent()) || '';
    step(`card: ${text.slice(0, 160)}`);
    if (!text.startsWith(`Cluster '${CLUSTER}': 2 CPU workers x 2 threads, from Dask Gateway, not made here`)) {
      problems.push('the card is not titled by the short name, once');
    }
    // the clock time on the day it started, else the date: two hours ago is yesterday between midnight and 2 am
    if (!/up since (\d\d:\d\d:\d\d|[A-Z][a-z]{2} \d\d \d\d:\d\d)/.test(text) || !text.includes('connected in 1.20 s')) {
      problems.push("the card does not tell the cluster's age and the connection's time apart");
    }
    if (text.includes('started in')) problems.push('the card says "started in" for a cluster it connected to');
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpu-magics:open');
    });
    const row = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
    await row.waitFor({ timeout: 60000 });
    const meta = (await row.locator('.jp-GpuMagics-clusterMeta').textContent()) || '';
    const title = (await row.locator('.jp-GpuMagics-clusterTitle').textContent()) || '';
    step(`side panel: ${title} | ${meta}`);
    if (!/\u00b7 up 2\.0 h/.test(meta)) problems.push(`the side panel does not tell the cluster's own age: "${meta}"`);
    if (!title.startsWith(CLUSTER) || title.length > 60) problems.push(`the side panel's title is "${title}"`);
    const uptime = await row.locator('.jp-GpuMagics-uptime').evaluate(node => {
      const range = document.createRange();
      range.selectNodeContents(node);
      return new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top))).size;
    });
    if (uptime !== 1) problems.push(`the side panel's "up 2.0 h" is cut over ${uptime} lines`);
    for (const theme of ['light', 'dark']) {
      await setTheme(page, theme);
      await card.scrollIntoViewIfNeeded();
      await steadyScreenshot(card, { path: path.join(artifacts, `gateway-card-${theme}.png`) });
      await steadyScreenshot(row, { path: path.join(artifacts, `gateway-panel-${theme}.png`) });
      await page.screenshot({ path: path.join(artifacts, `gateway-window-${theme}.png`) });
    }
    await setTheme(page, 'light');
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[gateway] FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  step('the gateway cluster reads by its short name and its own age');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
