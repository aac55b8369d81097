import { GpuPanelModel, leftoverGroups, ModelChange } from '../src/model/panelModel';
import { idleHold, leftover } from './fixtures';

const GIB = 2 ** 30;

describe('leftoverGroups', () => {
  it('pairs each summary line with the processes on the GPU it names', () => {
    const reply = {
      time: 1,
      leftovers: [
        leftover(1, { gpu: 0, gpu_label: 'GPU 0' }),
        leftover(2, { gpu: 1, gpu_label: 'GPU 1' }),
        leftover(3, { gpu: 0, gpu_label: 'GPU 0' })
      ],
      summary: [
        'left by a kernel that has ended: 2 processes hold 8.0 GiB on GPU 0',
        'left by a kernel that has ended: 1 process holds 4.0 GiB on GPU 1'
      ]
    };
    const groups = leftoverGroups(reply);
    expect(groups.map(g => [g.gpuLabel, g.line, g.processes.map(p => p.pid)])).toEqual([
      ['GPU 0', reply.summary[0], [1, 3]],
      ['GPU 1', reply.summary[1], [2]]
    ]);
  });

  it('tells a GPU of another host from this host\u2019s GPU of the same number', () => {
    const groups = leftoverGroups({
      time: 1,
      leftovers: [leftover(1, { gpu_label: 'GPU 1' }), leftover(2, { gpu_label: 'node-2 \u00b7 GPU 1' })],
      summary: [
        'left by a kernel that has ended: 1 process holds 4.0 GiB on node-2 \u00b7 GPU 1',
        'left by a kernel that has ended: 1 process holds 4.0 GiB on GPU 1'
      ]
    });
    expect(groups.map(g => [g.gpuLabel, g.processes.map(p => p.pid)])).toEqual([
      ['node-2 \u00b7 GPU 1', [2]],
      ['GPU 1', [1]]
    ]);
  });

  it('gives a process that no line names a line of its own, so it can be ended too', () => {
    const groups = leftoverGroups({ time: 1, leftovers: [leftover(7, { used_memory: 3 * GIB }), leftover(7, { gpu: 2, gpu_label: 'GPU 2', used_memory: null })], summary: [] });
    expect(groups.map(g => g.line)).toEqual([
      'left by a kernel that has ended: 1 process holds 3.0 GiB on GPU 1',
      'left by a kernel that has ended: 1 process holds 0 B on GPU 2'
    ]);
  });
});

describe('GpuPanelModel leftovers and idle holds', () => {
  it('keeps the leftovers as groups and says so', () => {
    const model = new GpuPanelModel();
    const changes: ModelChange[] = [];
    model.changed.connect((_, change) => changes.push(change));
    expect(model.leftovers).toEqual([]);
    model.setLeftovers({ time: 1, leftovers: [leftover(1)], summary: ['left by a kernel that has ended: 1 process holds 4.0 GiB on GPU 1'] });
    expect(model.leftovers.map(g => g.processes.map(p => p.pid))).toEqual([[1]]);
    model.setLeftovers({ time: 2, leftovers: [], summary: [] });
    expect(model.leftovers).toEqual([]);
    expect(changes).toEqual(['leftovers', 'leftovers']);
  });

  it('gives a kernel\u2019s idle hold only once the server has a line for it, and renders the clusters again', () => {
    const model = new GpuPanelModel();
    const changes: ModelChange[] = [];
    model.changed.connect((_, change) => changes.push(change));
    model.setIdleHolds({ time: 1, warning_min: 30, kernels: [idleHold('k1'), idleHold('k2', { line: null, idle_s: 60 })] });
    expect(model.idleHold('k1')?.held).toBe(11 * GIB);
    expect(model.idleHold('k2')).toBeNull(); // idle, but not for long enough
    expect(model.idleHold('k3')).toBeNull();
    expect(model.idleHold(null)).toBeNull();
    expect(model.idleHolds.map(hold => hold.kernel_id)).toEqual(['k1']);
    model.setIdleHolds({ time: 2, warning_min: 30, kernels: [] });
    expect(model.idleHold('k1')).toBeNull();
    expect(changes).toEqual(['clusters', 'clusters']);
  });
});
