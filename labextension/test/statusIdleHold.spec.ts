import { idleHoldStatus } from '../src/statusBar/text';
import { idleHold } from './fixtures';

describe('idleHoldStatus', () => {
  const reply = (kernels = [idleHold('front'), idleHold('other', { path: null, idle_s: 3600 })]) => ({
    time: 1,
    warning_min: 30,
    kernels
  });

  it('says nothing where no kernel has held idle GPUs long enough', () => {
    expect(idleHoldStatus(null, 'front')).toEqual({ suffix: '', lines: [] });
    expect(idleHoldStatus(reply([idleHold('front', { line: null })]), 'front')).toEqual({ suffix: '', lines: [] });
  });

  it('says how long for the notebook in front, its line first', () => {
    const status = idleHoldStatus(reply(), 'front');
    expect(status.suffix).toBe(' \u00b7 held idle 32 min');
    expect(status.lines[0]).toBe(`train.ipynb ${idleHold('front').line}`);
    expect(status.lines[1]).toMatch(/^kernel other /);
  });

  it('counts the others when the notebook in front holds nothing idle', () => {
    expect(idleHoldStatus(reply(), 'elsewhere').suffix).toBe(' \u00b7 2 notebooks hold idle GPUs');
    expect(idleHoldStatus(reply(), null).lines).toHaveLength(2);
    expect(idleHoldStatus(reply([idleHold('other')]), 'front').suffix).toBe(' \u00b7 1 notebook holds idle GPUs');
  });
});
