import { gpuStatus, kernelGpus, newerSnapshot } from '../src/statusBar/text';
import type { IProcessesReply } from '../src/types';
import { holder, reading } from './fixtures';

const GIB = 2 ** 30;

describe('gpuStatus', () => {
  const gpus = [
    reading(0, { gpu_util: 40, memory_used: 10 * GIB, memory_total: 80 * GIB }),
    reading(1, { gpu_util: 80, memory_used: 30 * GIB, memory_total: 80 * GIB })
  ];

  it('shows the GPUs the kernel in front holds memory on', () => {
    const status = gpuStatus(gpus, [1]);
    expect(status.text).toBe('GPU 1 \u00b7 80% \u00b7 30.0 GiB / 80.0 GiB');
    expect(status.title.split('\n')[0]).toBe('The GPUs this notebook\u2019s kernel uses (click for the GPU panel):');
  });

  it('shows all of the server\u2019s GPUs when the kernel holds none', () => {
    expect(gpuStatus(gpus, []).text).toBe('GPUs 0,1 \u00b7 60% \u00b7 40.0 GiB / 2 \u00d7 80.0 GiB');
    expect(gpuStatus(gpus, null).title).toContain('GPU 1 \u00b7 ');
  });

  it('says so where the server has no GPU', () => {
    expect(gpuStatus([], null).text).toBe('No GPU');
  });
});

describe('kernelGpus', () => {
  it('lists the GPUs a kernel holds memory on, on this server only', () => {
    const reply: IProcessesReply = {
      time: 1,
      status: null,
      unreadable_gpus: [],
      others: [],
      reporting_kernels: [],
      processes: [
        holder({ kernel_id: 'k1', gpu: 1, host: null }),
        holder({ kernel_id: 'k1', gpu: 0, host: null }),
        holder({ kernel_id: 'k1', gpu: 3, host: '10.0.0.2' }),
        holder({ kernel_id: 'k2', gpu: 2, host: null })
      ]
    };
    expect(kernelGpus(reply, 'k1')).toEqual([0, 1]);
    expect(kernelGpus(reply, null)).toBeNull();
    expect(kernelGpus(null, 'k1')).toBeNull();
  });
});

describe('the totals and the cadence agree with the cards', () => {
  it('says n \u00d7 each GPU\u2019s memory where the GPUs are alike, the sum where not', () => {
    const h200 = 150754820096; // 140.4 GiB each: a rounded sum would say 281 GiB beside two cards of 140 GiB
    const alike = [reading(0, { memory_total: h200 }), reading(1, { memory_total: h200 })];
    expect(gpuStatus(alike, null).text).toMatch(/ \/ 2 \u00d7 140 GiB$/);
    const mixed = [reading(0, { memory_total: 80 * GIB }), reading(1, { memory_total: 40 * GIB })];
    expect(gpuStatus(mixed, null).text).toMatch(/ \/ 120 GiB$/);
  });

  it('takes the newer of the panel\u2019s feed and its own poll', () => {
    const older = { time: 10, gpus: [reading(0)], host: null, status: null } as never;
    const newer = { time: 11, gpus: [reading(0)], host: null, status: null } as never;
    expect(newerSnapshot(null, older)).toBe(older);
    expect(newerSnapshot(older, newer)).toBe(newer);
    expect(newerSnapshot(newer, older)).toBe(newer);
  });
});
