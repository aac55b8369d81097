// The panel when the server stops accepting the page's credentials: it says so, stops retrying, offers Retry.
// Usage: node forbidden.mjs BASE_URL TOKEN THEME (light or dark). Prints "READY" when the test may restart the server with a new token.
import path from 'node:path';
import { launch } from './chromium.mjs';

const [base, token, theme] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
const phase = () => document.querySelector('.jp-GpuMagics-status')?.getAttribute('data-phase');

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  const sockets = [];
  page.on('websocket', socket => {
    if (socket.url().includes('/gpu-magics/')) {
      sockets.push(socket.url());
    }
  });
  try {
    await page.goto(`${base}lab?token=${token}`);
    await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
      timeout: 120000
    });
    await page.evaluate(async () => {
      await window.jupyterapp.restored;
      await window.jupyterapp.commands.execute('gpu-magics:open');
    });
    if (theme === 'dark') {
      await page.evaluate(() => window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Dark' }));
      await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'false', null, { timeout: 30000 });
    }
    await page.waitForFunction(p => eval(`(${p})()`) === 'open', phase.toString(), { timeout: 60000 });
    console.log('READY');
    await page.waitForFunction(p => eval(`(${p})()`) === 'forbidden', phase.toString(), { timeout: 120000 });
    const banner = await page.locator('.jp-GpuMagics-banner').textContent();
    console.log(`[forbidden] banner: ${banner}`);
    await page.screenshot({ path: path.join(artifacts, `forbidden-${theme}.png`) });
    const before = sockets.length;
    await page.waitForTimeout(10000);
    console.log(`[forbidden] sockets opened while refused: ${sockets.length - before}`);
    // JupyterLab's own "Server Connection Error" dialog opens when one of its polls fell in the restart (more
    // often on a busy machine): it is not the panel's, and it covers the Retry button, so close it.
    const lost = page.locator('.jp-Dialog', { hasText: 'Server Connection Error' });
    if (await lost.count()) {
      console.log('[forbidden] closing JupyterLab\u2019s connection dialog');
      await page.keyboard.press('Escape');
      await lost.waitFor({ state: 'detached', timeout: 10000 });
    }
    await page.locator('.jp-GpuMagics-retry').click();
    await page.waitForFunction(p => eval(`(${p})()`) === 'forbidden', phase.toString(), { timeout: 60000 });
    console.log(`[forbidden] retry opened ${sockets.length - before} socket(s) and is refused again`);
  } catch (error) {
    await page.screenshot({ path: path.join(artifacts, 'forbidden-failure.png') }).catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(`[forbidden] FAILED: ${error.stack || error}`);
  process.exit(1);
});
