// fs and path read the cases shared with the Python tests.
/// <reference types="node" />

import { Backoff } from '../src/server/backoff';
import { chartSpanLabel, sparklinePath } from '../src/views/chart';
import { clusterCommand } from '../src/model/clusters';
import { readFileSync } from 'fs';
import { join } from 'path';

import {
  formatAge,
  formatDuration,
  formatBytes,
  formatBytesPair,
  formatNumber,
  formatNumberPair,
  formatPercent,
  memoryPercent
} from '../src/format';
import { Ring } from '../src/model/ring';

describe('Backoff', () => {
  it('doubles up to the maximum and resets', () => {
    const backoff = new Backoff(1000, 8000, () => 1);
    expect([1, 2, 3, 4, 5].map(() => backoff.next())).toEqual([1000, 2000, 4000, 8000, 8000]);
    expect(backoff.attempt).toBe(5);
    backoff.reset();
    expect(backoff.next()).toBe(1000);
  });

  it('jitters between 75% and 100%', () => {
    expect(new Backoff(1000, 8000, () => 0).next()).toBe(750);
  });
});

describe('Ring', () => {
  it('keeps the newest values in order', () => {
    const ring = new Ring(3);
    [1, 2, 3, 4].forEach(v => ring.push(v));
    expect(ring.values()).toEqual([2, 3, 4]);
    ring.push(null);
    expect(ring.values()[2]).toBeNaN();
    ring.clear();
    expect(ring.values()).toEqual([]);
    expect(() => new Ring(0)).toThrow();
  });
});

describe('format', () => {
  it('formats bytes, percentages and ages', () => {
    expect(formatBytes(null)).toBe('\u2013');
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(150754820096)).toBe('140 GiB');
    expect(formatPercent(49.6)).toBe('50%');
    expect(formatPercent(null)).toBe('\u2013');
    expect(memoryPercent(25, 100)).toBe(25);
    expect(memoryPercent(25, null)).toBeNull();
    expect(formatAge(0, 30)).toBe('30 s');
    expect(formatAge(0, 600)).toBe('10 min');
    expect(formatAge(0, 5400)).toBe('1.5 h');
  });

  // gpu_magics/display/format.py is tested against the same cases.
  const file = join(__dirname, '..', '..', 'tests', 'data', 'format_cases.json');
  const cases = JSON.parse(readFileSync(file, 'utf-8')) as {
    bytes: [number | null, string][];
    percent: [number | null, string][];
    number: [number | null, string, string][];
    age: [number, string][];
    duration: [number, string][];
  };

  it.each(cases.bytes)('formats %p bytes as in Python', (value, expected) => {
    expect(formatBytes(value)).toBe(expected);
  });

  it.each(cases.percent)('formats %p%% as in Python', (value, expected) => {
    expect(formatPercent(value)).toBe(expected);
  });

  it.each(cases.age)('says %p seconds ago as in Python', (seconds, expected) => {
    expect(formatAge(1000 - seconds, 1000)).toBe(expected);
  });

  it.each(cases.duration)('writes a timeout of %p seconds as in Python', (seconds, expected) => {
    expect(formatDuration(seconds)).toBe(expected);
  });

  it.each(cases.number)(
    'formats %p %s as in Python',
    (value, unit, expected) => {
      expect(formatNumber(value, unit)).toBe(expected);
    }
  );
});

describe('sparklinePath', () => {
  it('maps values to the box and breaks at gaps', () => {
    expect(sparklinePath([], 100, 10)).toBe('');
    expect(sparklinePath([0, 100], 100, 10)).toBe('M0.0,10.0 L100.0,0.0');
    expect(sparklinePath([50, NaN, 200], 100, 10)).toBe('M0.0,5.0 M100.0,0.0');
  });
});

describe('clusterCommand', () => {
  it('builds the magic line for each action', () => {
    expect(clusterCommand({ action: 'stop' })).toBe('%gpucluster stop');
    expect(clusterCommand({ action: 'restart' })).toBe('%gpucluster restart');
    expect(clusterCommand({ action: 'scale', workers: 3 })).toBe('%gpucluster scale 3');
    expect(() => clusterCommand({ action: 'scale', workers: 0 })).toThrow();
    expect(() => clusterCommand({ action: 'scale', workers: 1.5 })).toThrow();
  });
});

describe('compact pairs for the cards', () => {
  it('keeps memory and power short, in one unit', () => {
    expect(formatBytesPair(72156033024, 150754820096)).toBe('67.2/140 GiB');
    expect(formatBytesPair(536870912, 150754820096)).toBe('0.5/140 GiB');
    expect(formatBytesPair(null, 150754820096)).toBe('\u2013/140 GiB');
    expect(formatBytesPair(1024, null)).toBe('1.0 KiB');
    expect(formatBytesPair(null, null)).toBe('\u2013');
    expect(formatNumberPair(283.4, 700, 'W')).toBe('283/700 W');
    expect(formatNumberPair(null, 700, 'W')).toBe('\u2013/700 W');
    expect(formatNumberPair(90, null, 'W')).toBe('90 W');
  });
});

describe('chartSpanLabel', () => {
  it('says how much time the chart covers', () => {
    expect(chartSpanLabel([])).toBe('');
    expect(chartSpanLabel([10])).toBe('');
    expect(chartSpanLabel([10, 55])).toBe('last 45 s');
    expect(chartSpanLabel([0, 150, 300])).toBe('last 5 min');
    expect(chartSpanLabel([0, 7200])).toBe('last 2.0 h');
  });
});
