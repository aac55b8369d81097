// The panel after a server restart: it says it is reconnecting, then shows live samples again.
// Usage: node reconnect.mjs BASE_URL TOKEN. Prints "READY" when the test may restart the server.
import path from 'node:path';
import { launch } from './chromium.mjs';

const [base, token] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
const phase = () =>
  document.querySelector('.jp-GpuMagics-status')?.getAttribute('data-phase');

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  try {
    await page.goto(`${base}lab?token=${token}`);
    await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
      timeout: 120000
    });
    await page.evaluate(async () => {
      await window.jupyterapp.restored; // else restoring the layout may hide the panel again
      await window.jupyterapp.commands.execute('gpu-magics:open');
    });
    await page.waitForFunction(p => eval(`(${p})()`) === 'open', phase.toString(), { timeout: 60000 });
    await page.locator('.jp-GpuMagics-card').first().waitFor();
    console.log('READY');
    await page.waitForFunction(p => eval(`(${p})()`) === 'reconnecting', phase.toString(), { timeout: 60000 });
    await page.screenshot({ path: path.join(artifacts, 'reconnecting.png') });
    console.log('[reconnect] the panel says it is reconnecting');
    await page.waitForFunction(p => eval(`(${p})()`) === 'open', phase.toString(), { timeout: 120000 });
    const before = await page.locator('[data-gpu="0"] [data-metric="util"] .jp-GpuMagics-value').textContent();
    await page.waitForFunction(
      previous =>
        document.querySelector('[data-gpu="0"] [data-metric="util"] .jp-GpuMagics-value')?.textContent !==
        previous,
      before,
      { timeout: 30000 }
    );
    await page.screenshot({ path: path.join(artifacts, 'reconnected.png') });
    console.log('[reconnect] live again after the restart');
  } catch (error) {
    await page.screenshot({ path: path.join(artifacts, 'reconnect-failure.png') }).catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(`[reconnect] FAILED: ${error.stack || error}`);
  process.exit(1);
});
