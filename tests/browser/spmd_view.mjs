// SPMD cells in real JupyterLab: run tests/notebooks/spmd_view.ipynb (2 CPU ranks: merged output and the status
// rows, then a failing rank with a long error that stops the other), check what shows (one table per cell, rows
// on one line), and take light and dark screenshots of the
// status rows and the failure at the default sidebar width. Screenshots go to $ARTIFACTS.
// Usage: node spmd_view.mjs BASE_URL TOKEN NOTEBOOK_PATH
import fs from 'node:fs';
import path from 'node:path';
import { launch, openNotebook, steadyScreenshot } from './chromium.mjs';

const [base, token, notebook] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[spmd] ${message}`);

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems = [];
  try {
    step('loading JupyterLab');
    await openNotebook(page, base, token, notebook);
    step('running every cell');
    await page.evaluate(() => void window.jupyterapp.commands.execute('notebook:run-all-cells'));
    await page.waitForFunction(
      () => {
        const prompts = Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'));
        return prompts.length === 4 && prompts.every(p => /\[\d+\]/.test(p.textContent || ''));
      },
      null,
      { timeout: 240000 }
    );
    const found = await page.evaluate(() => {
      const outputs = Array.from(document.querySelectorAll('.jp-CodeCell')).map(cell =>
        Array.from(cell.querySelectorAll('.jp-OutputArea-output')).map(o => o.textContent || '').join('\n')
      );
      return {
        tables: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-spmd table').length,
        ran: outputs[1] || '',
        failed: outputs[2] || '',
        stopped: outputs[3] || ''
      };
    });
    step(`found: ${JSON.stringify(found).slice(0, 600)}`);
    if (found.tables !== 2) problems.push(`expected one SPMD status table per cell (2), found ${found.tables}`);
    if (!found.ran.includes('[0,1] epoch 1 loss 0.52')) problems.push('the alike line does not show once with its ranks');
    if (!found.ran.includes('[1] rank 1 of 2')) problems.push('a differing line does not show with its rank');
    if (!/2 done in/.test(found.ran)) problems.push('the status rows do not say both ranks are done');
    if (!found.failed.includes('rank 1 (127.0.0.1 · CPU) failed first:')) problems.push('the failing rank is not named');
    if (!found.failed.includes("ValueError: a bad batch on rank 1")) problems.push('the rank\u2019s error is not shown');
    if (!found.failed.includes('rank 0: stopped')) problems.push('the other rank is not said to be stopped');
    if (!found.stopped.includes('stopped cluster')) problems.push('the cluster did not stop');
    for (const theme of ['light', 'dark']) {
      if (theme === 'dark') {
        await page.evaluate(() => window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Dark' }));
        await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'false', null, { timeout: 60000 });
        // the theme change shows JupyterLab's splash over the page for a moment
        await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 60000 }).catch(() => null);
        await page.waitForTimeout(1000);
      }
      const cells = page.locator('.jp-CodeCell');
      for (const [index, name] of [[1, 'ran'], [2, 'failed']]) {
        const output = cells.nth(index).locator('.jp-OutputArea');
        await output.scrollIntoViewIfNeeded();
        await steadyScreenshot(output, { path: path.join(artifacts, `spmd-${name}-${theme}.png`) });
      }
      // the status table fits the output area: no column runs past it
      const overflow = await page.evaluate(() =>
        Array.from(document.querySelectorAll('.gpu-magics-spmd table')).filter(
          table => table.getBoundingClientRect().right > table.closest('.jp-OutputArea-output').getBoundingClientRect().right + 1
        ).length
      );
      if (overflow) problems.push(`${overflow} status table(s) run past the output area (${theme})`);
      // every status row stays one line, the failing rank's long error too (clipped in the row, in full below)
      const wrapped = await page.evaluate(() =>
        Array.from(document.querySelectorAll('.gpu-magics-spmd table tr')).filter(row => {
          const header = row.closest('table').querySelector('tr').getBoundingClientRect().height;
          return row.getBoundingClientRect().height > header * 1.5;
        }).length
      );
      if (wrapped) problems.push(`${wrapped} status row(s) wrap onto a second line (${theme})`);
    }
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[spmd] problems:\n- ${problems.join('\n- ')}`);
    process.exit(1);
  }
  console.log('[spmd] every SPMD view rendered');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
