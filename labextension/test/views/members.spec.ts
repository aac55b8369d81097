/** @jest-environment jsdom */
import { membersView } from '../../src/views/sections/members';
import { member, memberGpu } from '../fixtures';

function lines(view: HTMLElement): string[] {
  // a host heading as "# host", a member line as its parts joined by " | "
  return Array.from(view.children, child =>
    child.classList.contains('jp-GpuMagics-host')
      ? `# ${child.textContent}`
      : Array.from(child.children, part => part.textContent || `[${part.getAttribute('title')}]`).join(' | ')
  );
}

describe('membersView', () => {
  it('groups the members by host, the kernel first, and names workers only where a host has several', () => {
    const view = membersView([
      member('w-0', '127.0.0.1', [memberGpu('127.0.0.1', 0, { gpu_util: 12, memory_used: 3 * 2 ** 30 })]),
      member('w-1', '127.0.0.1', [memberGpu('127.0.0.1', 1)]),
      member('w-2', '127.0.0.2', [memberGpu('127.0.0.2', 0)]),
      member('kernel', '127.0.0.1', [memberGpu('127.0.0.1', 0)], { role: 'kernel' })
    ]);
    expect(lines(view)).toEqual([
      '# 127.0.0.1',
      'GPU 0 \u00b7 kernel | [utilization, 0\u2013100%] | 87% | 67.2/140 GiB',
      'GPU 0 \u00b7 w-0 | [utilization, 0\u2013100%] | 12% | 3.0/140 GiB',
      'GPU 1 \u00b7 w-1 | [utilization, 0\u2013100%] | 87% | 67.2/140 GiB',
      '# 127.0.0.2',
      'GPU 0 | [utilization, 0\u2013100%] | 87% | 67.2/140 GiB'
    ]);
    const heading = view.querySelector('[data-host="127.0.0.2"]');
    expect(heading?.getAttribute('title')).toBe('host 127.0.0.2');
  });

  it('says what a GPU line is in its tooltip, and fills the bar to the utilization', () => {
    const view = membersView([member('w-0', '10.0.0.1', [memberGpu('10.0.0.1', 1, { gpu_util: 42.25 })])]);
    const line = view.querySelector('.jp-GpuMagics-memberGpu') as HTMLElement;
    expect(line.dataset.member).toBe('w-0');
    expect(line.dataset.gpuLabel).toBe('10.0.0.1 \u00b7 GPU 1');
    expect(line.title).toBe('10.0.0.1 \u00b7 GPU 1 \u00b7 NVIDIA H200\nworker w-0 (tcp://10.0.0.1:40000)\nit holds 4.0 GiB (cupy)');
    expect((line.querySelector('.jp-GpuMagics-barFill') as HTMLElement).style.width).toBe('42.3%');
  });

  it('leaves out what the process holds when unknown', () => {
    const gpu = memberGpu('10.0.0.1', 0, { process_memory: null });
    const view = membersView([member('kernel', '10.0.0.1', [gpu], { role: 'kernel' })]);
    expect((view.querySelector('.jp-GpuMagics-memberGpu') as HTMLElement).title).toBe(
      '10.0.0.1 \u00b7 GPU 0 \u00b7 NVIDIA H200\nthe kernel (tcp://10.0.0.1:40000)'
    );
  });

  it('marks an unreadable GPU, and a worker with no GPU line says why', () => {
    const view = membersView([
      member('w-2', '127.0.0.2', [memberGpu('127.0.0.2', 0, { error: 'GPU is lost', gpu_util: null })]),
      member('w-3', '127.0.0.2', [], { time: null }),
      member('w-4', '127.0.0.2', [])
    ]);
    const unreadable = view.querySelector('.jp-GpuMagics-unreadable') as HTMLElement;
    expect(unreadable.textContent).toBe('unreadable');
    expect(unreadable.title).toBe('GPU is lost');
    expect(view.querySelector('.jp-GpuMagics-miniBar')).toBeNull();
    const idle = Array.from(view.querySelectorAll<HTMLElement>('.jp-GpuMagics-memberIdle'));
    expect(idle.map(line => [line.dataset.member, line.title, line.textContent])).toEqual([
      ['w-3', 'tcp://127.0.0.2:40000', 'w-3waiting for its first report'],
      ['w-4', 'tcp://127.0.0.2:40000', 'w-4no GPU']
    ]);
  });
});
