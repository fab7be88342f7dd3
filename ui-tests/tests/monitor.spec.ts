/**
 * The live memory monitor widget (%gpumem monitor / jupyter_gpumem.Monitor) in a notebook:
 * a replayed synthetic trace, and a replayed trace recorded on an H100, draw their series and
 * header; on this GPU-less machine the live monitor shows its explained empty state.
 */
import * as path from 'path';
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import { expectNoTestFolderShown, IMAGES_DIR, openNotebook } from './gpumem';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1100 } });

const MONITOR = '.jupyter-gpumem-monitor';
const RECORDED_TRACES_DIR = path.resolve(__dirname, '..', '..', 'tests', 'data', 'traces');

/** Opens the notebook, runs its first code cell (the one that makes the monitor) and returns the
 * monitor once it is drawn. */
async function runMonitorCell(page: IJupyterLabPageFixture, tmpPath: string, notebook: string): Promise<Locator> {
  await openNotebook(page, tmpPath, notebook);
  await page.notebook.runCell(1, true);
  const monitor = page.locator(MONITOR);
  await expect(monitor).toBeVisible({ timeout: 60000 });
  return monitor;
}

test('a replay monitor draws its memory bands and a header labelled replay and synthetic', async ({ page, tmpPath }) => {
  const monitor = await runMonitorCell(page, tmpPath, 'monitor_replay.ipynb');

  const header = monitor.locator('.jupyter-gpumem-header');
  await expect(header).toContainText('REPLAY');
  await expect(header).toContainText('SYNTHETIC');
  // The trace's last sample (jupyter_gpumem/demo_traces/synthetic_bfc_growth_fragmenting.jsonl),
  // worked by hand: bytes_in_use 15149863936 B; pool 34227617792 B less in use = 17.77 GiB;
  // the process's 34770780160 B less the pool = 518 MiB; NVML's used 35323379712 B less the
  // process = 527 MiB; free 50197430272 B of 85520809984 B; bytes_limit 64140607488 B; peak
  // 20914496512 B; 1 - largest free block 2882316288 B / pool unused = 85%; headroom = limit
  // less the pool = 27.86 GiB; used first: NVML's used of the total, 41%.
  await expect(header).toContainText(
    'GPU 0: NVIDIA H100 80GB HBM3: used 32.90 GiB / 79.65 GiB (41%) · JAX arrays 14.11 GiB · pool unused 17.77 GiB · outside JAX 518.00 MiB' +
      ' · other processes 527.00 MiB · free 46.75 GiB · of 79.65 GiB · limit 59.74 GiB · peak 19.48 GiB' +
      ' · fragmentation 85% · largest free block 2.68 GiB · headroom 27.86 GiB'
  );

  const plot = monitor.locator('.js-plotly-plot').first();
  await expect(plot).toBeVisible({ timeout: 60000 });
  // The legend names the series synthetic_bfc_growth_fragmenting has and no other (no PyTorch
  // or CUDA pool series, no host pids), in the order the monitor ranks them: the bands as they
  // stack (docs/monitor.md), then the lines, then the cell markers.
  const legend = plot.locator('.legend .legendtext');
  await expect(legend).toHaveText([
    'JAX arrays (in use)', 'JAX pool, unused', 'this process, outside JAX', 'other processes', 'free',
    'bytes_limit', 'peak in use', 'total', 'fragmentation', 'largest free block', 'headroom (limit - pool)',
    'cells'
  ]);
  // Each drawn series has at least one drawn path.
  expect(await plot.locator('.scatterlayer .trace path.js-line, .scatterlayer .trace path.js-fill').count()).toBeGreaterThan(10);
  await expect(plot.locator('.annotation-text')).toContainText('REPLAY · SYNTHETIC');

  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-replay.png') });
});

test('a replay of a trace recorded on an H100 draws the CUDA driver pool and is not labelled synthetic', async ({
  page,
  tmpPath
}) => {
  // The trace as committed, copied byte for byte beside the notebook, which names it relatively
  // (a kernel starts in its notebook's folder, under the test server's temporary root).
  await page.contents.uploadFile(
    path.join(RECORDED_TRACES_DIR, 'cuda_async_growing.jsonl'),
    `${tmpPath}/cuda_async_growing.jsonl`
  );
  const monitor = await runMonitorCell(page, tmpPath, 'monitor_replay_h100.ipynb');

  const header = monitor.locator('.jupyter-gpumem-header');
  await expect(header).toContainText('REPLAY');
  await expect(header).not.toContainText('SYNTHETIC');
  // Where it came from, from the trace's header line: its JAX and the settings it ran under.
  await expect(monitor).toContainText(
    'trace cuda_async_growing.jsonl · host vm · jax 0.11.2 · preallocate off · fraction 0.75 · allocator cuda_async'
  );
  // The trace's last sample (tests/data/traces/cuda_async_growing.jsonl, line 72), worked by
  // hand: memory_stats bytes_in_use 0 B, peak_bytes_in_use 9663676420 B = 9.00 GiB; bytes_limit
  // and largest_free_block_bytes are 0, which cuda_async reports for "none" (left out), as are
  // fragmentation and headroom (no BFC pool). The driver pool (cuda_pool) reserved 8891924480 B =
  // 8.28 GiB, all of it unused (used_bytes 0); the process's NVML 9468641280 B less the pool =
  // 576716800 B = 550.00 MiB outside JAX; NVML's used 9477881856 B less the process = 9240576 B
  // = 8.81 MiB other processes; NVML's free 75539611648 B = 70.35 GiB (under total less the bands
  // below it) of 85520809984 B = 79.65 GiB.
  await expect(header).toContainText(
    'GPU 0: NVIDIA H100 80GB HBM3: used 8.83 GiB / 79.65 GiB (11%) · JAX arrays 0 B · pool unused 8.28 GiB · outside JAX 550.00 MiB' +
      ' · other processes 8.81 MiB · free 70.35 GiB · of 79.65 GiB · peak 9.00 GiB' +
      ' · CUDA pool reserved 8.28 GiB · used 0 B'
  );

  const plot = monitor.locator('.js-plotly-plot').first();
  await expect(plot).toBeVisible({ timeout: 60000 });
  // The legend names the series this trace has: the bands, peak and total, the driver pool's
  // two lines (reserved, used), and the script's named markers; no bytes_limit or BFC lines, no
  // PyTorch or host pids, and no cells (a script, recorded outside a notebook: its trace has no
  // cell events, and plotly names no series that has no point).
  const legend = plot.locator('.legend .legendtext');
  await expect(legend).toHaveText([
    'JAX arrays (in use)', 'JAX pool, unused', 'this process, outside JAX', 'other processes', 'free',
    'peak in use', 'total', 'CUDA pool reserved', 'CUDA pool used', 'markers'
  ]);
  expect(await plot.locator('.scatterlayer .trace path.js-line, .scatterlayer .trace path.js-fill').count()).toBeGreaterThan(8);
  // The plot's label, then one label per record.mark() call of the job
  // (bench/gpu_proof_jobs/allocation_story.py), in the trace's order; the recorder's own
  // script_start and script_end are not drawn, and names past 24 characters are cut (the hover
  // has them whole).
  const annotation = plot.locator('.annotation-text');
  await expect(annotation).toHaveText([
    'REPLAY', 'backend started', 'holding 1 GiB more', 'holding 2 GiB more', 'holding 4 GiB more',
    'freed the 2 GiB array', 'sixteen 256 MiB arrays', 'freed every other 256 M…', '1 GiB array after the h…',
    'freed everything'
  ]);
  await expect(annotation.first()).not.toContainText('SYNTHETIC');
  await expectNoTestFolderShown(monitor, tmpPath);

  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-replay-h100.png') });

  // A cut label's hover gives the whole name (after the picture, which shows no hover).
  await annotation.nth(7).hover();
  await expect(plot.locator('.hoverlayer')).toContainText('freed every other 256 MiB array');
});

test('on a machine without an NVIDIA GPU the live monitor explains why it is empty', async ({ page, tmpPath }) => {
  const monitor = await runMonitorCell(page, tmpPath, 'monitor_empty.ipynb');
  const empty = monitor.locator('.jupyter-gpumem-empty');
  // The first reading replaces "waiting for the first reading" with the reasons.
  await expect(empty).toContainText('No NVIDIA GPU can be read', { timeout: 30000 });
  await expect(empty).toContainText('will start when JAX does');
  await expect(monitor.locator('.js-plotly-plot')).toHaveCount(0);
  // With no plot drawn, the still under it (for pages without the widget) is hidden all the same.
  const still = page.locator("img[src*='jupyter-gpumem-still']");
  await expect(still).toHaveCount(1);
  await expect(still).toBeHidden();
  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-empty.png') });
});

test('with JAX on the CPU the live monitor draws the bytes of its live arrays, cell by cell', async ({
  page,
  tmpPath
}) => {
  const monitor = await runMonitorCell(page, tmpPath, 'monitor_cpu.ipynb'); // JAX starts on the CPU, then %gpumem monitor
  const header = monitor.locator('.jupyter-gpumem-header');
  await expect(header).toContainText('JAX memory on the CPU', { timeout: 30000 });
  await expect(header).toContainText('CPU: JAX arrays: ');
  await expect(header).toContainText("in host memory (not a GPU's)");
  await expect(monitor.locator('.jupyter-gpumem-empty')).toHaveCount(0);

  // Each cell's arrays show in the header's number and the plot's one band.
  await page.notebook.runCell(2, true); // a: 64 MiB
  await expect(header).toContainText('64.00 MiB in 1 live array, in host', { timeout: 30000 });
  await page.notebook.runCell(3, true); // b: 128 MiB more
  await expect(header).toContainText('192.00 MiB in 2 live arrays', { timeout: 30000 });
  await page.notebook.runCell(4, true); // del a
  await expect(header).toContainText('128.00 MiB in 1 live array, in host', { timeout: 30000 });

  const plot = monitor.locator('.js-plotly-plot');
  await expect(plot).toHaveCount(1);
  await expect(plot.locator('.legend .legendtext').first()).toHaveText('JAX live arrays (CPU)');
  await expect(plot.locator('.g-ytitle')).toHaveText('MiB');
  // The band went up to 192 MiB and back to 128: its largest drawn value, as plotly holds it.
  const drawn = await plot.evaluate((gd: any) => {
    const band = gd.data.find((t: any) => t.meta === 'cpu_arrays');
    return { max: Math.max(...band.y), last: band.y[band.y.length - 1] };
  });
  expect(drawn).toEqual({ max: 192, last: 128 });
  await expectNoTestFolderShown(monitor, tmpPath);
  // Each cell run is marked with its label, the first one included.
  await expect(plot.locator('.textpoint')).toHaveText(['[2]', '[3]', '[4]']);
  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-cpu.png') });
});

test('a stopped monitor leaves a still of its last window where it was', async ({ page, tmpPath }) => {
  // JAX on the CPU: monitor, 64 MiB, 128 MiB more, then m.close().
  const monitor = await runMonitorCell(page, tmpPath, 'monitor_still.ipynb');
  const header = monitor.locator('.jupyter-gpumem-header');
  await expect(monitor.locator('.js-plotly-plot')).toBeVisible({ timeout: 60000 }); // plotly.js, asked for
  const output = page.locator('.jp-Cell').nth(1).locator('.jp-OutputArea');
  // The still's output is on the page but hidden while the live view draws.
  const still = output.locator("img[src*='jupyter-gpumem-still']");
  await expect(still).toHaveCount(1);
  await expect(still).toBeHidden();
  await page.notebook.runCell(2, true);
  await page.notebook.runCell(3, true);
  await expect(header).toContainText('192.00 MiB in 2 live arrays', { timeout: 30000 });
  await expect(still).toBeHidden();

  await page.notebook.runCell(4, true); // m.close()
  await expect(monitor).toHaveCount(0);
  await expect(still).toBeVisible();
  // Its words are the output's text/plain; its picture drew both arrays' cells.
  const svg = decodeURIComponent((await still.getAttribute('src'))!.replace(/^data:image\/svg\+xml,/, ''));
  expect(svg).toContain('CPU: JAX arrays');
  expect(svg).toContain('[2]');
  expect(svg).toContain('[3]');
  await output.screenshot({ path: path.join(IMAGES_DIR, 'monitor-still.png') });
});
