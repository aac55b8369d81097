import { gpuStatus, kernelGpus } from '../src/statusBar/text';
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
    expect(gpuStatus(gpus, []).text).toBe('GPUs 0,1 \u00b7 60% \u00b7 40.0 GiB / 160 GiB');
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
