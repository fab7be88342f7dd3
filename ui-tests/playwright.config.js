/**
 * Browser tests in Debian's chromium. Two Jupyter servers: "live" (this machine as it is,
 * no GPU here) and "replay" (a synthetic trace). Specs named *.replay.spec.ts run against
 * the replay server; every other spec against the live one.
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const LIVE_PORT = Number(process.env.GPUMEM_UI_PORT || 8898);
const REPLAY_PORT = LIVE_PORT + 1;
const CHROMIUM = process.env.GPUMEM_CHROMIUM || '/usr/bin/chromium';

const server = (port, replay) => ({
  command: `GPUMEM_UI_PORT=${port} GPUMEM_UI_REPLAY=${replay} jupyter lab --config jupyter_server_test_config.py`,
  url: `http://localhost:${port}/lab`,
  timeout: 120 * 1000,
  reuseExistingServer: false,
  stdout: 'ignore',
  stderr: 'pipe'
});

module.exports = {
  ...baseConfig,
  reporter: [['list'], ['html', { open: 'never' }]],
  workers: 1,
  retries: 0,
  outputDir: 'test-results',
  use: {
    ...baseConfig.use,
    launchOptions: {
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-dev-shm-usage',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        '--disable-quic'
      ]
    },
    video: 'off',
    trace: 'off'
  },
  projects: [
    {
      name: 'live',
      testIgnore: /.*\.replay\.spec\.ts/,
      use: { baseURL: `http://localhost:${LIVE_PORT}` }
    },
    {
      name: 'replay',
      testMatch: /.*\.replay\.spec\.ts/,
      use: { baseURL: `http://localhost:${REPLAY_PORT}` }
    }
  ],
  webServer: [server(LIVE_PORT, ''), server(REPLAY_PORT, 'demo')]
};
