import { elsewhereLine, elsewhereSummary, elsewhereWhere } from '../src/elsewhere';
import { GpuPanelModel } from '../src/model';
import { cluster, elsewhere } from './fixtures';

describe('elsewhereSummary', () => {
  it('counts the clusters of kernels the server does not run', () => {
    expect(elsewhereSummary([elsewhere()])).toBe('1 cluster of a kernel this server does not run');
    expect(elsewhereSummary([elsewhere(), elsewhere({ name: 'b' })])).toBe(
      '2 clusters of kernels this server does not run'
    );
  });
});

describe('elsewhereWhere', () => {
  it('says where a kernel with no server id runs: its pid, host and connection file', () => {
    expect(elsewhereWhere(elsewhere())).toBe(
      'a kernel with no server id, pid 4242 on gpu-node-2, connection file tmpqc6nlsg9.json'
    );
  });

  it('names another server\u2019s kernel by its id, and leaves out what an older record does not say', () => {
    const other = elsewhere({ kernel_id: '1a2b3c4d-0000-4000-8000-000000000000', host: null, connection_file: null });
    expect(elsewhereWhere(other)).toBe('kernel 1a2b3c4d, pid 4242');
  });
});

describe('elsewhereLine', () => {
  it('says the cluster, its kind, its workers and its scheduler', () => {
    expect(elsewhereLine(elsewhere())).toBe('other \u00b7 cpu \u00b7 2 workers \u00b7 tcp://127.0.0.1:8790');
    expect(elsewhereLine(elsewhere({ workers: 1, kind: 'gpu' }))).toBe(
      'other \u00b7 gpu \u00b7 1 worker \u00b7 tcp://127.0.0.1:8790'
    );
  });
});

describe('GpuPanelModel.setClusters', () => {
  it('keeps the clusters elsewhere apart, oldest first, and keeps them through a failed refresh', () => {
    const model = new GpuPanelModel();
    model.setClusters([cluster({ name: 'mine' })], null, [elsewhere({ name: 'b', started_at: 5 }), elsewhere({ name: 'a', started_at: 2 })]);
    expect(model.clusters.map(c => c.name)).toEqual(['mine']);
    expect(model.clustersElsewhere.map(c => c.name)).toEqual(['a', 'b']);
    model.setClusters(model.clusters, 'the server did not answer');
    expect(model.clustersElsewhere.map(c => c.name)).toEqual(['a', 'b']);
    model.setClusters([], null, []);
    expect(model.clustersElsewhere).toEqual([]);
  });
});
