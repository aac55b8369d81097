/** The small controls the panel's views share: a button, an in-app link, a bar filled to a percentage. */
import { el } from '../dom';

/** A panel button: `enabled` false disables it; `attrs` may add classes or a title. */
export function button(
  label: string,
  enabled: boolean,
  onClick: () => void,
  attrs: Record<string, string> = {}
): HTMLButtonElement {
  const node = el('button', { class: 'jp-GpuMagics-button', type: 'button', ...attrs }, label);
  node.disabled = !enabled;
  node.addEventListener('click', onClick);
  return node;
}

/** A link that runs `onClick` in the app instead of following an address. */
export function link(text: string, onClick: () => void): HTMLElement {
  const a = el('a', { class: 'jp-GpuMagics-link', href: '#' }, text);
  a.addEventListener('click', event => {
    event.preventDefault();
    onClick();
  });
  return a;
}

/** The fill of a bar: `percent` (null as 0) clamped to 0-100. */
export function barFill(percent: number | null): HTMLElement {
  const fill = el('div', { class: 'jp-GpuMagics-barFill' });
  fill.style.width = `${Math.min(100, Math.max(0, percent ?? 0)).toFixed(1)}%`;
  return fill;
}
