// The rich displays in real JupyterLab: run tests/notebooks/displays.ipynb and check each display rendered
// (arrays with their chunk-grid SVG, graph summaries with their DAG SVG, an escaped <script> name that never runs,
// the widget mode). Screenshots go to $ARTIFACTS. Usage: node displays.mjs BASE_URL TOKEN NOTEBOOK_PATH
import fs from 'node:fs';
import path from 'node:path';
import { launch } from './chromium.mjs';

const [base, token, notebook] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[displays] ${message}`);

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems = [];
  page.on('dialog', async dialog => {
    problems.push(`a dialog opened: ${dialog.message()} (a name was not escaped)`);
    await dialog.dismiss();
  });
  try {
    step('loading JupyterLab');
    await page.goto(`${base}lab/tree/${notebook}?token=${token}`);
    await page.waitForSelector('#main', { timeout: 120000 });
    await page.waitForFunction(
      () => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle',
      null,
      { timeout: 120000 }
    );
    step('running every cell');
    await page.evaluate(() => void window.jupyterapp.commands.execute('notebook:run-all-cells'));
    await page.waitForFunction(
      () => {
        const prompts = Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'));
        return prompts.length > 0 && prompts.every(p => /\[\d+\]/.test(p.textContent || ''));
      },
      null,
      { timeout: 240000 }
    );
    const counts = await page.evaluate(() => ({
      arrays: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-array').length,
      arraySvgs: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-array svg').length,
      graphs: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-graph').length,
      graphSvgs: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-graph svg').length,
      errors: document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
        .length,
      tracebacks: Array.from(document.querySelectorAll('.jp-OutputArea-output')).filter(o =>
        /Traceback|Error:/.test(o.textContent || '')
      ).length,
      escaped: Array.from(document.querySelectorAll('.jp-OutputArea-output')).some(o =>
        (o.textContent || '').includes('<script>alert(1)</script>')
      ),
      widgets: document.querySelectorAll('.jp-OutputArea-output .widget-html, .jp-OutputArea-output .jupyter-widgets')
        .length
    }));
    step(`rendered: ${JSON.stringify(counts)}`);
    if (counts.arrays < 6 || counts.arraySvgs < 6) problems.push(`expected 6+ array displays with SVG grids`);
    if (counts.graphs < 3 || counts.graphSvgs < 3) problems.push(`expected 3 graph summaries with SVG DAGs`);
    if (counts.tracebacks > 0) problems.push(`${counts.tracebacks} outputs show an error`);
    if (!counts.escaped) problems.push('the <script> array name is not shown as text');
    if (counts.widgets < 1) problems.push('the widget-mode display did not render as a widget');
    await page.locator('.gpu-magics-array').first().screenshot({ path: path.join(artifacts, 'displays-array.png') });
    await page.locator('.gpu-magics-graph').nth(1).screenshot({ path: path.join(artifacts, 'displays-graph.png') });
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[displays] FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  step('all displays rendered');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
