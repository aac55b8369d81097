import {
  adaptProblem,
  clusterCommand,
  clusterMembers,
  clusterTitle,
  countModels,
  gpuShortLabel,
  memberName,
  membersByHost,
  memberWithoutGpus,
  parseAdapt,
  parseWorkers,
  saidLines,
  scaleProblem
} from '../src/model/clusters';
import type { KernelMessage } from '@jupyterlab/services';

import type { ICluster } from '../src/types';
import { cluster, factsOf, member, memberGpu } from './fixtures';

const GPU = factsOf('gpu');
const GATEWAY = factsOf('gateway');
const ATTACHED = factsOf('attached');

describe('clusterTitle', () => {
  it('names a CPU cluster by its workers', () => {
    expect(clusterTitle(cluster({ kind: 'cpu', workers: 2 }))).toBe('CPU cluster \u00b7 2 workers');
    expect(clusterTitle(cluster({ kind: 'cpu', workers: 1 }))).toBe('CPU cluster \u00b7 1 worker');
  });

  it('names a GPU cluster by the GPU models its workers report', () => {
    const members = [0, 1, 2, 3].map(i => member(`w${i}`, '10.0.0.1', [memberGpu('10.0.0.1', i)]));
    const gpu = cluster({ kind: 'gpu', facts: GPU, workers: 4, gpus: ['0', '1', '2', '3'], members });
    expect(clusterTitle(gpu)).toBe('GPU cluster \u00b7 4\u00d7 NVIDIA H200');
  });

  it('names a Dask Gateway cluster by its workers and their GPUs', () => {
    expect(clusterTitle(cluster({ kind: 'gateway', facts: GATEWAY, workers: 2, manager: 'Dask Gateway: default.3f2a' }))).toBe(
      'Dask Gateway \u00b7 2 workers'
    );
    const members = [0, 1].map(i => member(`w${i}`, '10.0.0.1', [memberGpu('10.0.0.1', i)]));
    expect(clusterTitle(cluster({ kind: 'gateway', facts: GATEWAY, workers: 2, members }))).toBe(
      'Dask Gateway \u00b7 2\u00d7 NVIDIA H200'
    );
  });

  it('names a GPU cluster by its devices before the first reports', () => {
    expect(clusterTitle(cluster({ kind: 'gpu', facts: GPU, workers: 2, gpus: ['0', '1'] }))).toBe(
      'GPU cluster \u00b7 2 workers on GPU 0, 1'
    );
  });

  it('leaves the kernel out of the GPU models', () => {
    const members = [
      member('kernel', '10.0.0.1', [memberGpu('10.0.0.1', 0, { name: 'Tesla T4' })], { role: 'kernel' }),
      member('w0', '10.0.0.1', [memberGpu('10.0.0.1', 1)])
    ];
    expect(clusterTitle(cluster({ kind: 'gpu', facts: GPU, workers: 1, members }))).toBe('GPU cluster \u00b7 1\u00d7 NVIDIA H200');
  });

  it('names an attached cluster by what it has', () => {
    const attached = cluster({ kind: 'attached', facts: ATTACHED, workers: 3, scheduler_address: 'tcp://10.0.0.5:8786' });
    expect(clusterTitle(attached)).toBe('attached \u00b7 3 workers');
    expect(clusterTitle({ ...attached, gpus: ['NVIDIA A100', 'NVIDIA A100'] })).toBe(
      'attached \u00b7 2\u00d7 NVIDIA A100'
    );
  });

  it('counts mixed models in first-seen order', () => {
    expect(countModels(['A100', 'T4', 'A100'])).toBe('2\u00d7 A100, 1\u00d7 T4');
  });
});

describe('cluster members', () => {
  it('are empty where an older record has none', () => {
    const older = { ...cluster() } as Partial<ICluster>;
    delete older.members;
    expect(clusterMembers(older as ICluster)).toEqual([]);
  });

  it('group by host in first-seen order, the kernel first within its host', () => {
    const groups = membersByHost([
      member('w0', '127.0.0.1', [memberGpu('127.0.0.1', 0)]),
      member('w1', '127.0.0.2', [memberGpu('127.0.0.2', 0)]),
      member('kernel', '127.0.0.1', [], { role: 'kernel' }),
      member('w2', '127.0.0.2', [memberGpu('127.0.0.2', 1)], { host_label: '127.0.0.2' })
    ]);
    expect(groups.map(g => [g.host, g.members.map(m => m.name)])).toEqual([
      ['127.0.0.1', ['kernel', 'w0']],
      ['127.0.0.2', ['w1', 'w2']]
    ]);
  });

  it('group by the host as shown (a hostname) when there is one', () => {
    const groups = membersByHost([
      member('w0', '10.0.0.7', [], { host_label: 'node7' }),
      member('w1', '10.0.0.7', [], { host_label: 'node7' })
    ]);
    expect(groups).toHaveLength(1);
    expect(groups[0]?.host).toBe('node7');
  });

  it('name a GPU without the host its heading shows', () => {
    expect(gpuShortLabel(memberGpu('127.0.0.2', 1))).toBe('GPU 1');
    expect(gpuShortLabel(memberGpu('127.0.0.2', 3, { label: '' }))).toBe('GPU 3');
  });

  it('say whether a worker has reported yet', () => {
    expect(memberWithoutGpus(member('w', 'h', [], { time: null }))).toBe('waiting for its first report');
    expect(memberWithoutGpus(member('w', 'h', []))).toBe('no GPU');
    expect(memberName(member('tcp://h:1', 'h', [], { role: 'kernel' }))).toBe('kernel');
    expect(memberName(member('w3', 'h', []))).toBe('w3');
  });
});

describe('scale dialog', () => {
  it.each([
    ['', 'Enter a number of workers, such as 2.'],
    ['   ', 'Enter a number of workers, such as 2.'],
    ['0', 'A cluster needs at least 1 worker; to end it, use Stop.'],
    ['-3', 'A cluster needs at least 1 worker; to end it, use Stop.'],
    ['2.5', 'Workers come whole: enter 2 or 3, not 2.5.'],
    ['two', '\u201ctwo\u201d is not a number: enter a whole number of workers, such as 2.']
  ])('says what is wrong with %p', (text, message) => {
    expect(scaleProblem(text)).toBe(message);
    expect(parseWorkers(text)).toBeNull();
  });

  it('accepts a whole number of workers', () => {
    expect(scaleProblem(' 4 ')).toBeNull();
    expect(parseWorkers(' 4 ')).toBe(4);
    expect(parseWorkers('1')).toBe(1);
  });
});

describe('adapt', () => {
  it.each([
    ['', 'Enter the least and the most workers, such as 0 8.'],
    ['4', 'Enter the least and the most workers, such as 0 8.'],
    ['1 x', 'Enter the least and the most workers, such as 0 8.'],
    ['0 0', 'The most workers must be at least 1; to end the cluster, use Stop.'],
    ['5 2', 'The least (5) is more than the most (2).']
  ])('says what is wrong with %p', (text, message) => {
    expect(adaptProblem(text)).toBe(message);
    expect(parseAdapt(text)).toBeNull();
  });

  it('reads MIN MAX and makes the magic line', () => {
    expect(adaptProblem(' 0  8 ')).toBeNull();
    expect(parseAdapt(' 0  8 ')).toEqual([0, 8]);
    expect(clusterCommand({ action: 'adapt', minimum: 0, maximum: 8 })).toBe('%gpucluster adapt 0 8');
    expect(() => clusterCommand({ action: 'adapt', minimum: 3, maximum: 1 })).toThrow('is more than the most');
  });
});

describe('saidLines', () => {
  function message(msgType: string, content: object): KernelMessage.IIOPubMessage {
    return { header: { msg_type: msgType }, content } as unknown as KernelMessage.IIOPubMessage;
  }

  it("takes a display's text and printed lines, not stderr nor status", () => {
    const line = "%gpucluster: parked 2 workers of 'gpu': 9.0 GiB of GPU memory back to the server in 1.2 s";
    expect(saidLines(message('display_data', { data: { 'text/html': '<div>x</div>', 'text/plain': line } }))).toEqual([
      line
    ]);
    expect(saidLines(message('stream', { name: 'stdout', text: 'one\n\ntwo\n' }))).toEqual(['one', 'two']);
    expect(saidLines(message('stream', { name: 'stderr', text: 'a warning\n' }))).toEqual([]);
    expect(saidLines(message('status', { execution_state: 'idle' }))).toEqual([]);
  });
});

describe('clusterCommand park', () => {
  it('parks and resumes through %gpucluster', () => {
    expect(clusterCommand({ action: 'park' })).toBe('%gpucluster park');
    expect(clusterCommand({ action: 'resume' })).toBe('%gpucluster resume');
  });
});
