import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { devicesSocketUrl, feedAfterClose } from '../src/devicesFeed';

describe('devicesSocketUrl', () => {
  const sameHost = { wsUrl: 'ws://localhost:8888/', token: 'abc', appendToken: false };

  test('same host: no token in the URL, the login cookie authenticates', () => {
    assert.equal(
      devicesSocketUrl(sameHost, null),
      'ws://localhost:8888/jupyter-gpumem/api/devices/ws'
    );
  });

  test('the notebook path is one encoded parameter', () => {
    assert.equal(
      devicesSocketUrl(sameHost, 'nb dir/a&b.ipynb'),
      'ws://localhost:8888/jupyter-gpumem/api/devices/ws?notebook=nb%20dir%2Fa%26b.ipynb'
    );
  });

  test('under a base URL with the token appended, as JupyterLab does for another host', () => {
    const hub = { wsUrl: 'wss://hub.example/user/alice/', token: 't/k+n', appendToken: true };
    assert.equal(
      devicesSocketUrl(hub, 'a.ipynb'),
      'wss://hub.example/user/alice/jupyter-gpumem/api/devices/ws?notebook=a.ipynb&token=t%2Fk%2Bn'
    );
  });

  test('a wsUrl without its final slash, and an empty token, which is never appended', () => {
    const open = { wsUrl: 'ws://h:1/base', token: '', appendToken: true };
    assert.equal(devicesSocketUrl(open, null), 'ws://h:1/base/jupyter-gpumem/api/devices/ws');
  });
});

describe('feedAfterClose', () => {
  test('a socket that never answered while /devices did: the socket is blocked, poll', () => {
    assert.equal(feedAfterClose(false, true), 'polling');
  });

  test('a socket that never answered while /devices failed too: the server is away, try the socket again', () => {
    assert.equal(feedAfterClose(false, false), 'socket');
  });

  test('a socket that answered and then closed: open another', () => {
    assert.equal(feedAfterClose(true, true), 'socket');
    assert.equal(feedAfterClose(true, false), 'socket');
  });
});
