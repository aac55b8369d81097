import { clusterCommand, parkedText } from '../src/model/clusters';
import { parkedStatus } from '../src/statusBar/text';
import { cluster } from './fixtures';

const GIB = 1024 ** 3;
const parked = { since: 1000, bytes: 9 * GIB, workers: 2 };

describe('a parked cluster', () => {
  it('says on its card since when and what it keeps, and nothing while its workers run', () => {
    expect(parkedText(cluster({ parked }), 1000 + 12 * 60)).toBe(
      'parked 12 min \u00b7 9.0 GiB kept in host memory \u00b7 the next cell that sends it work resumes it'
    );
    expect(parkedText(cluster({ parked: null }), 2000)).toBeNull();
    const older = cluster();
    delete older.parked; // an older kernel's record has no such field
    expect(parkedText(older, 2000)).toBeNull();
    expect(clusterCommand({ action: 'resume' })).toBe('%gpucluster resume'); // what its Resume runs in the kernel
  });

  it('adds "· parked" to the status bar for the notebook in front only', () => {
    const clusters = [cluster({ name: 'gpu', kernel_id: 'front', parked }), cluster({ kernel_id: 'other' })];
    const status = parkedStatus(clusters, 'front', 1000 + 60);
    expect(status.suffix).toBe(' \u00b7 parked');
    expect(status.line).toBe(
      "Cluster 'gpu' is parked (1 min): its 2 workers gave their GPUs back, 9.0 GiB kept in host memory; the next " +
        'cell that sends it work resumes it (%gpucluster resume: now).'
    );
    expect(parkedStatus(clusters, 'other', 1090)).toEqual({ suffix: '', line: null });
    expect(parkedStatus(clusters, null, 1090)).toEqual({ suffix: '', line: null });
    expect(parkedStatus(null, 'front', 1090)).toEqual({ suffix: '', line: null });
  });
});
