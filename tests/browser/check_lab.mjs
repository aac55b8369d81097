// JupyterLab's own browser check (jupyterlab/browser-test.js), on the system Chromium via playwright-core:
// load the page, wait until every plugin has activated, fail on any error JupyterLab reports.
// Usage: node check_lab.mjs URL   (screenshots in $JLAB_BROWSER_CHECK_OUTPUT when set)
import fs from 'node:fs';
import path from 'node:path';
import { launch } from './chromium.mjs';

const url = process.argv[2];
const output = process.env.JLAB_BROWSER_CHECK_OUTPUT;

async function main() {
  const browser = await launch();
  const page = await browser.newPage();
  let failed = false;
  try {
    console.info('Navigating to page:', url);
    await page.goto(url);
    await page.locator('#jupyter-config-data').waitFor({ state: 'attached' });
    await page.waitForSelector('#main', { timeout: 100000 });
    const el = await page.waitForSelector('#browserTest', { timeout: 100000, state: 'attached' });
    await page.waitForSelector('.completed', { state: 'attached', timeout: 100000 });
    if (output) {
      fs.mkdirSync(output, { recursive: true });
      await page.screenshot({ path: path.join(output, 'browser-check.png') });
    }
    const plugin = process.env.CHECK_PLUGIN;
    if (plugin) {
      const active = await page.evaluate(id => window.jupyterapp?.isPluginActivated(id) ?? null, plugin);
      if (active !== true) {
        console.error(`Plugin ${plugin} is not activated (${active})`);
        failed = true;
      }
    }
    const errors = JSON.parse((await el.textContent()) || '[]');
    for (const error of errors) {
      console.error(`Parsed an error from text content: ${error.message}`, error);
      failed = true;
    }
  } finally {
    await browser.close();
  }
  if (failed) {
    process.exit(1);
  }
  console.info('Browser test complete');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
