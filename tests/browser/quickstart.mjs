// The quickstart as a newcomer meets it: open examples/quickstart.ipynb in JupyterLab, check that it opens
// unmodified and that no popup covers it, Run All, then run every command its outputs hint at, as printed.
// Usage: node quickstart.mjs BASE_URL TOKEN; screenshots go to $ARTIFACTS.
import fs from 'node:fs';
import path from 'node:path';
import { launch } from './chromium.mjs';

const [base, token] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[quickstart] ${message}`);
const check = (ok, message) => {
  if (!ok) {
    throw new Error(message);
  }
};
// the commands a hint names: %gpucluster with its arguments up to the end of the clause
const HINT = /(%gpucluster(?: --cpu-workers \d+)?)(?=[\s,;.)]|$)/g;

async function notebookState(page) {
  return page.evaluate(() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const cells = panel.content.widgets.filter(cell => cell.model.type === 'code');
    return {
      dirty: panel.context.model.dirty,
      busy: panel.sessionContext.session?.kernel?.status !== 'idle',
      pending: cells.filter(cell => cell.promptNode?.textContent?.includes('*')).length,
      errors: cells.flatMap(cell =>
        cell.model.outputs.toJSON().filter(output => output.output_type === 'error').map(o => `${o.ename}: ${o.evalue}`)
      ),
      text: cells.map(cell => cell.outputArea.node.innerText).join('\n')
    };
  });
}

async function runAll(page, timeout) {
  await page.evaluate(() => window.jupyterapp.commands.execute('notebook:run-all-cells'));
  await page.waitForFunction(
    () => {
      const panel = window.jupyterapp.shell.currentWidget;
      const cells = panel.content.widgets.filter(cell => cell.model.type === 'code');
      return (
        panel.sessionContext.session?.kernel?.status === 'idle' &&
        cells.every(cell => cell.model.executionCount !== null || cell.model.sharedModel.getSource().trim() === '') &&
        !cells.some(cell => cell.promptNode?.textContent?.includes('*'))
      );
    },
    null,
    { timeout, polling: 250 }
  );
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const shot = name => page.screenshot({ path: path.join(artifacts, `${name}.png`) });
  try {
    step('opening the quickstart');
    await page.goto(`${base}lab/tree/quickstart.ipynb?token=${token}`);
    await page.waitForFunction(() => window.jupyterapp?.shell.currentWidget?.sessionContext, null, {
      timeout: 120000
    });
    await page.evaluate(() => window.jupyterapp.shell.currentWidget.sessionContext.ready);
    await page.waitForFunction(
      () => window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle',
      null,
      { timeout: 120000 }
    );
    await page.waitForTimeout(3000); // the news question, where asked, comes a moment after start
    const opened = await notebookState(page);
    const dirtyTab = await page.locator('.lm-TabBar-tab.jp-mod-dirty').count();
    const metadata = await page.evaluate(() =>
      JSON.stringify(window.jupyterapp.shell.currentWidget.context.model.toJSON().metadata)
    );
    check(!opened.dirty && dirtyTab === 0, `the notebook shows the unsaved marker right after opening: ${metadata}`);
    const toasts = await page.locator('.Toastify__toast').allInnerTexts();
    check(toasts.length === 0, `a popup covers the notebook: ${JSON.stringify(toasts)}`);
    await shot('quickstart-opened');

    step('Run All');
    await runAll(page, 300000);
    const ran = await notebookState(page);
    check(ran.errors.length === 0, `cells failed: ${ran.errors.join(' | ')}`);
    await shot('quickstart-ran');
    const hints = [...new Set([...ran.text.matchAll(HINT)].map(match => match[1]))];
    step(`hinted commands: ${JSON.stringify(hints)}`);
    check(hints.length > 0, `no hint in the outputs: ${ran.text.slice(0, 2000)}`);

    for (const hint of hints) {
      step(`running ${hint} as printed`);
      await page.evaluate(source => {
        const panel = window.jupyterapp.shell.currentWidget;
        const model = panel.content.model.sharedModel;
        model.insertCells(model.cells.length, [
          { cell_type: 'code', source },
          // the cluster starts while cells run: this cell uses it (and waits for it) before the next stops it
          { cell_type: 'code', source: 'import gpu_magics\nprint(len(gpu_magics.client().scheduler_info()["workers"]), "workers up")' },
          { cell_type: 'code', source: '%gpucluster stop' }
        ]);
      }, hint);
      await runAll(page, 300000);
      const after = await notebookState(page);
      check(after.errors.length === 0, `${hint} failed: ${after.errors.join(' | ')}`);
      check(/Cluster '.*': /.test(after.text), `${hint} showed no cluster: ${after.text.slice(-1500)}`);
    }
    await shot('quickstart-hints');

    step('the status-bar item: the GPUs, and a click opens the panel');
    const item = page.locator('.jp-GpuMagics-statusItem');
    await page.waitForFunction(
      () => /^GPUs? [\d,]+ \u00b7 \d+% \u00b7 /.test(document.querySelector('.jp-GpuMagics-statusItem')?.textContent ?? ''),
      null,
      { timeout: 30000 }
    );
    await item.click();
    await page.locator('.jp-GpuMagics-card').first().waitFor({ state: 'visible', timeout: 30000 });
    await shot('quickstart-status-item');
    step('ok');
  } catch (error) {
    await shot('quickstart-failure').catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.log(`[quickstart] FAILED: ${error.stack || error}`);
  process.exit(1);
});
