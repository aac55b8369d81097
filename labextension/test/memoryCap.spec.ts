/** @jest-environment jsdom */
/**
 * A notebook's GPU memory cap (the server's, or its own lower one): what its processes hold on each GPU added up
 * against the cap, and the line under the notebook's title that says so, with a meter and who set the cap.
 */
import './jsdomShim';

import { GpuPanelModel, ownerCaps } from '../src/model/panelModel';
import type { IHolder } from '../src/types';
import { capLevel, capTitle, MemoryView } from '../src/views/sections/memory';
import { holder, processesReply } from './fixtures';

const GIB = 2 ** 30;
const BINDS =
  'The cap binds what CuPy, PyTorch, JAX and RMM allocate; memory taken outside them is counted here but not stopped.';

/** A process of train.ipynb under the server's 8 GiB cap, on GPU `gpu`. */
function capped(overrides: Partial<IHolder> = {}): IHolder {
  const gpu = overrides.gpu ?? 0;
  return holder({
    path: 'train.ipynb',
    kernel_id: 'k1',
    gpu,
    gpu_uuid: `GPU-${gpu}`,
    gpu_label: `GPU ${gpu}`,
    memory_cap: 8 * GIB,
    memory_cap_by: 'server',
    ...overrides
  });
}

function modelWith(processes: IHolder[]): GpuPanelModel {
  const model = new GpuPanelModel();
  model.setHolders(processesReply({ processes }));
  return model;
}

/** The cap lines of `owner`'s block, as the list renders them. */
function capLines(processes: IHolder[], owner = 'train.ipynb'): HTMLElement[] {
  const view = new MemoryView();
  view.render(modelWith(processes));
  const block = view.node.querySelector(`.jp-GpuMagics-owner[data-owner="${owner}"]`);
  return Array.from(block?.querySelectorAll<HTMLElement>('.jp-GpuMagics-cap') ?? []);
}

function meterWidth(line: HTMLElement): string {
  return (line.querySelector('.jp-GpuMagics-capMeter .jp-GpuMagics-barFill') as HTMLElement).style.width;
}

describe('a notebook\u2019s memory against its cap, per GPU', () => {
  it('adds up the notebook\u2019s kernel, workers and children on one GPU', () => {
    const caps = ownerCaps([
      capped({ pid: 1, role: 'kernel', used_memory: 3 * GIB }),
      capped({ pid: 2, role: 'worker', cluster: 'c', used_memory: 2 * GIB }),
      capped({ pid: 3, role: 'child', used_memory: GIB })
    ]);
    expect(caps).toEqual([{ gpuLabel: 'GPU 0', gpuUuid: 'GPU-0', used: 6 * GIB, cap: 8 * GIB, by: 'server' }]);
  });

  it('counts no other owner\u2019s rows, and gives each capped GPU its own entry, ordered like the GPUs', () => {
    const model = modelWith([
      capped({ pid: 1, gpu: 1, used_memory: 5 * GIB, memory_cap: 4 * GIB, memory_cap_by: 'notebook' }),
      capped({ pid: 1, gpu: 0, used_memory: 2 * GIB }),
      capped({ pid: 7, path: 'other.ipynb', kernel_id: 'k2', used_memory: 7 * GIB }),
      holder({ pid: 4242, path: null, kernel_id: null, role: 'other', used_memory: 40 * GIB })
    ]);
    const owners = new Map(model.memoryByOwner().map(owner => [owner.owner, owner]));
    expect(owners.get('train.ipynb')?.caps).toEqual([
      { gpuLabel: 'GPU 0', gpuUuid: 'GPU-0', used: 2 * GIB, cap: 8 * GIB, by: 'server' },
      { gpuLabel: 'GPU 1', gpuUuid: 'GPU-1', used: 5 * GIB, cap: 4 * GIB, by: 'notebook' }
    ]);
    expect(owners.get('other.ipynb')?.caps.map(cap => cap.used)).toEqual([7 * GIB]);
    expect(owners.get('pid 4242')?.caps).toEqual([]);
  });

  it('tells a remote worker\u2019s GPU from this host\u2019s GPU of the same number, this host first', () => {
    const caps = ownerCaps([
      capped({ pid: 2, host: '127.0.0.2', gpu_uuid: 'GPU-remote-0', gpu_label: '127.0.0.2 \u00b7 GPU 0' }),
      capped({ pid: 1 })
    ]);
    expect(caps.map(cap => cap.gpuLabel)).toEqual(['GPU 0', '127.0.0.2 \u00b7 GPU 0']);
  });

  it('has no entry, and the list no line, where no cap applies', () => {
    const free = [holder({ path: 'train.ipynb', used_memory: 6 * GIB })];
    expect(modelWith(free).memoryByOwner()[0]?.caps).toEqual([]);
    expect(capLines(free)).toEqual([]);
  });

  it('leaves out a GPU of the notebook where no cap applies', () => {
    const caps = ownerCaps([capped({ gpu: 0 }), capped({ gpu: 1, memory_cap: null, memory_cap_by: null })]);
    expect(caps.map(cap => cap.gpuLabel)).toEqual(['GPU 0']);
  });
});

describe('the cap line under a notebook\u2019s title', () => {
  it('says what the notebook holds of its cap, with the meter filled to it', () => {
    const lines = capLines([capped({ used_memory: 6.1 * GIB })]);
    expect(lines).toHaveLength(1);
    const line = lines[0] as HTMLElement;
    expect(line.textContent).toBe('GPU 0 \u00b7 6.1 GiB of its 8 GiB cap');
    expect(line.dataset.cap).toBe('GPU 0');
    expect(line.dataset.level).toBe('under');
    expect(line.dataset.over).toBe('false');
    expect(meterWidth(line)).toBe('76.3%');
  });

  it('sits right under the title, before the process lines', () => {
    const view = new MemoryView();
    view.render(modelWith([capped({ used_memory: GIB })]));
    const block = view.node.querySelector('.jp-GpuMagics-owner') as HTMLElement;
    const classes = Array.from(block.children).map(child => child.className);
    expect(classes.slice(0, 3)).toEqual(['jp-GpuMagics-ownerTitle', 'jp-GpuMagics-cap', 'jp-GpuMagics-holder']);
  });

  it('is near the cap from 90% of it (the meter takes the warning colour)', () => {
    const line = capLines([capped({ used_memory: 7.2 * GIB })])[0] as HTMLElement;
    expect(line.textContent).toBe('GPU 0 \u00b7 7.2 GiB of its 8 GiB cap');
    expect(line.dataset.level).toBe('near');
    expect(line.dataset.over).toBe('false');
    expect(capLevel(8 * GIB, 8 * GIB)).toBe('near');
    expect(capLevel(7.1 * GIB, 8 * GIB)).toBe('under');
  });

  it('says when the notebook is over its cap, the meter full', () => {
    const line = capLines([capped({ used_memory: 9.2 * GIB })])[0] as HTMLElement;
    expect(line.textContent).toBe('GPU 0 \u00b7 9.2 GiB: over its 8 GiB cap');
    expect(line.dataset.level).toBe('over');
    expect(line.dataset.over).toBe('true');
    expect(meterWidth(line)).toBe('100.0%');
  });

  it('says in its tooltip that the server set the cap, and what it binds', () => {
    const line = capLines([capped({ used_memory: GIB })])[0] as HTMLElement;
    expect(line.title).toBe(
      `The server caps each notebook at 8 GiB a GPU (c.GpuMagicsServer.memory_cap). ${BINDS}`
    );
    expect(line.dataset.by).toBe('server');
  });

  it('says in its tooltip that the notebook capped itself, and how to lift it', () => {
    const line = capLines([capped({ used_memory: GIB, memory_cap: 4 * GIB, memory_cap_by: 'notebook' })])[0];
    expect(line?.title).toBe(
      'This notebook capped itself at 4 GiB a GPU (%gpumemory --cap); %gpumemory --cap off lifts it to the ' +
        `server\u2019s cap, if any. ${BINDS}`
    );
    expect(capTitle({ cap: 7.5 * GIB, by: 'server' })).toContain('at 7.5 GiB a GPU');
  });

  it('adds up several processes of the notebook on the GPU, one line for them', () => {
    const lines = capLines([
      capped({ pid: 1, used_memory: 4 * GIB }),
      capped({ pid: 2, role: 'worker', cluster: 'c', used_memory: 3.5 * GIB })
    ]);
    expect(lines.map(line => line.textContent)).toEqual(['GPU 0 \u00b7 7.5 GiB of its 8 GiB cap']);
  });
});
