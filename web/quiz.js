// The interview quiz: ten questions (single and multiple choice) with explanations, in both
// languages. `answer` lists the indices of the right options.

import { t, getLang } from './i18n.js';

export const QUESTIONS = [
  {
    multi: false, answer: [2],
    zh: {
      q: '一句话概括 pmap 做的事：',
      o: ['把数组从设备拷回主机', '在一台设备上把循环改写成向量指令', '把同一个函数放到多台设备上，各算一份数据', '对函数求反向导数'],
      e: 'pmap 的核心是“加人手”：同一份代码在每台设备上各跑一份，数据按设备切开。向量化是 vmap 的事，求导是 grad 的事，拷回主机只是读结果。',
    },
    en: {
      q: 'In one sentence, what does pmap do?',
      o: ['Copies arrays from the devices back to the host', 'Rewrites a loop into vector instructions on one device', 'Runs the same function on several devices, each on its share of the data', 'Takes the reverse-mode derivative of a function'],
      e: 'pmap is "more hands": the same program runs on every device, with the data cut by device. Vectorizing is vmap\'s job, derivatives are grad\'s, and copying back is just reading the result.',
    },
  },
  {
    multi: false, answer: [0],
    zh: {
      q: '默认情况下，pmap 沿哪一维把输入分给各设备？',
      o: ['第 0 维（批量维）', '最后一维（特征维）', '元素最多的那一维', '不切分，每台设备都拿整份'],
      e: '默认 in_axes=0：第 0 维被分给设备，其余各维原样留在每台设备上。想让某个参数整份复制，要显式写 in_axes=None。',
    },
    en: {
      q: 'By default, along which axis does pmap hand the input to the devices?',
      o: ['Axis 0 (the batch axis)', 'The last axis (features)', 'Whichever axis is longest', 'None: every device gets the whole input'],
      e: 'The default in_axes is 0: axis 0 is spread over the devices and the other axes stay intact on each. To copy an argument whole, say in_axes=None explicitly.',
    },
  },
  {
    multi: false, answer: [1],
    zh: {
      q: '关于 axis_size，哪一项说得对？',
      o: ['它是每台设备上的样本数', '它是映射轴的长度，等于参与的设备数，也是结果第 0 维的长度', '它可以随意设得比设备数大', '它只影响反向传播'],
      e: 'axis_size 是被映射那一维的大小：有几份就要几台设备，结果第 0 维也就这么长。每台设备上的样本数是 batch / axis_size，不是 axis_size 本身。',
    },
    en: {
      q: 'Which statement about axis_size is right?',
      o: ['It is the number of samples on each device', 'It is the length of the mapped axis: the number of devices taking part, and the length of the result\'s axis 0', 'It may freely exceed the number of devices', 'It only matters for back-propagation'],
      e: 'axis_size is the size of the mapped axis: one device per entry, and the result\'s axis 0 has that length. The samples per device are batch / axis_size, not axis_size itself.',
    },
  },
  {
    multi: false, answer: [3],
    zh: {
      q: 'vmap 与 pmap 最根本的区别是？',
      o: ['vmap 只能用于推理，pmap 只能用于训练', 'vmap 跨设备，pmap 在单设备内', '两者只是名字不同', 'vmap 在一台设备内向量化，pmap 把工作分到多台设备'],
      e: 'vmap 提高一台设备的“手速”，pmap 增加设备的“人手”。它们对外的形状可以一样，底层执行方式完全不同；用途上并没有推理/训练之分。',
    },
    en: {
      q: 'What is the essential difference between vmap and pmap?',
      o: ['vmap is for inference only, pmap for training only', 'vmap spans devices, pmap stays on one', 'Only the names differ', 'vmap vectorizes on one device; pmap spreads the work over several devices'],
      e: 'vmap makes one device work faster; pmap adds devices. Their outer shapes can match while the execution underneath differs entirely; neither is tied to inference or training.',
    },
  },
  {
    multi: true, answer: [0, 1, 3],
    zh: {
      q: '在 pmap 里组合其他变换时，哪些做法正确？',
      o: ['在 pmap 内嵌套 vmap，让每台设备再按样本批量处理', '先把随机数密钥 split 成每台设备一份，再传进 pmap', '在 pmap 的函数里用宿主语言的 if 直接判断张量的值', '在 pmap 里对 grad 的结果做 pmean，得到各设备一致的梯度'],
      e: '嵌套 vmap、按设备拆分密钥、用 pmean 聚合梯度都是标准用法。被追踪的张量在追踪时还没有值，不能拿来做宿主语言的 if，要用 select / cond 之类的函数式写法。',
    },
    en: {
      q: 'Which ways of combining transforms with pmap are right?',
      o: ['Nest vmap inside pmap so that each device batches over examples', 'Split the random key into one key per device before passing it to pmap', 'Branch with the host language\'s if on a tensor\'s value inside the pmapped function', 'pmean the result of grad inside pmap to get the same gradient on every device'],
      e: 'Nesting vmap, splitting the key per device and averaging gradients with pmean are all standard. A traced tensor has no value while tracing, so a host-language if cannot branch on it: use select / cond instead.',
    },
  },
  {
    multi: false, answer: [2],
    zh: {
      q: '数据并行训练中，各设备算出各自的梯度之后，通常接下来做什么？',
      o: ['各自用自己的梯度更新自己的参数', '只保留 0 号设备的梯度', '把梯度在设备间求平均，再用同一个平均梯度更新每份参数', '丢弃梯度，只同步损失'],
      e: '每台设备只见过自己那块数据，梯度是局部的。用 pmean（AllReduce 求平均）得到全局梯度，每台设备做同样的更新，参数副本才会保持一致；各自更新会让副本分叉。',
    },
    en: {
      q: 'In data-parallel training, after each device has its own gradient, what usually comes next?',
      o: ['Each device updates its own parameters with its own gradient', 'Keep only device 0\'s gradient', 'Average the gradients across devices and apply the same average on every copy', 'Drop the gradients and synchronize only the loss'],
      e: 'Each device saw only its block, so its gradient is local. pmean (an all-reduce average) gives the global gradient and every device applies the same update, keeping the copies identical; separate updates make them drift apart.',
    },
  },
  {
    multi: false, answer: [1],
    zh: {
      q: '用 4 台设备计算 A(4096×4096) · B(4096×64)，按行切分时每台设备做什么？',
      o: ['每台设备算出一个标量再相加', '每台设备拿 A 的 1024 行和整份 B，算出 C 的 1024 行', '每台设备都算一遍完整的 A·B，最后互相比对', '每台设备只保存 B，不参与计算'],
      e: '按行切分时 A_i 是 1024×4096，B 整份广播，C_i = A_i·B 是 1024×64，四块竖着拼回 4096×64。重复计算或只存不算都浪费了设备。',
    },
    en: {
      q: 'Four devices compute A(4096×4096) · B(4096×64) with a row split. What does each device do?',
      o: ['Computes one scalar, then the scalars are added', 'Takes 1024 rows of A and the whole of B and computes 1024 rows of C', 'Computes the full A·B and the copies are compared', 'Stores B and computes nothing'],
      e: 'With a row split A_i is 1024×4096, B is broadcast whole, and C_i = A_i·B is 1024×64; the four blocks stack back into 4096×64. Computing everything everywhere, or storing without computing, wastes the devices.',
    },
  },
  {
    multi: true, answer: [0, 1, 2],
    zh: {
      q: 'pmap 程序报错了，哪些排查办法合理？',
      o: ['先用 vmap 或单设备跑通函数的逻辑', '检查批量大小能否被设备数整除', '把设备数降到 1 再跑一次，缩小问题范围', '删掉所有随机数代码，免得“干扰”'],
      e: '先单人演练再团队上阵：vmap / 单设备验证逻辑，然后核对整除关系——这是最常见的报错来源。随机数不是报错的原因，删掉只会改变程序的含义。',
    },
    en: {
      q: 'A pmap program fails. Which ways of tracking it down make sense?',
      o: ['Get the function\'s logic right with vmap or on one device first', 'Check that the batch divides by the number of devices', 'Run again with a single device to narrow the problem down', 'Delete all random-number code so it cannot "interfere"'],
      e: 'Rehearse alone before cooking as a team: check the logic with vmap or one device, then check divisibility, the most common source of errors. Random numbers do not cause such errors; removing them only changes what the program means.',
    },
  },
  {
    multi: false, answer: [3],
    zh: {
      q: '批量 1024、设备 4 台，按设备切分后每台设备处理多少个样本？',
      o: ['1024 个，每台都一样', '4 个', '由最快的设备决定', '256 个'],
      e: 'batch = axis_size × batch_per_device，所以每台 1024 / 4 = 256 个。若批量不能整除设备数，brigade 会返回 IndivisibleSplit 错误并给出可行的设备数。',
    },
    en: {
      q: 'With a batch of 1024 and 4 devices, how many samples does each device process after the split?',
      o: ['1024, the same on every device', '4', 'Whatever the fastest device decides', '256'],
      e: 'batch = axis_size × batch_per_device, so each device gets 1024 / 4 = 256. If the batch does not divide by the device count, brigade returns an IndivisibleSplit error naming the counts that work.',
    },
  },
  {
    multi: true, answer: [0, 1],
    zh: {
      q: '关于 pmap 输出的形状，哪些说法正确？',
      o: ['JAX 式的 pmap 结果多出的第 0 维长度等于设备数', '按分桌读法（shard_map），各设备的输出块沿批量维拼回完整批量', '结果只存在于 0 号设备上，其他设备不保留', '结果第 0 维与批量大小毫无关系'],
      e: 'JAX 式 pmap 按设备堆叠，第 0 维就是设备维；分桌读法把各块拼回 (B, …)。结果留在各自设备上，读取时才汇合；第 0 维正是由设备数或批量决定的。',
    },
    en: {
      q: 'Which statements about the shape of pmap\'s output are right?',
      o: ['JAX-style pmap stacks the results: the new axis 0 has one entry per device', 'In the split reading (shard_map) the devices\' blocks are joined back along the batch axis into the full batch', 'The result exists only on device 0; the others keep nothing', 'Axis 0 of the result has nothing to do with the batch'],
      e: 'JAX-style pmap stacks per device, so axis 0 is the device axis; the split reading joins the blocks back into (B, …). Results stay on their devices until read; axis 0 is set by the device count or the batch.',
    },
  },
];

const LETTERS = 'ABCD';

/** Render the quiz into `root` in the current language, keeping answers already given. */
export function renderQuiz(root, state) {
  const lang = getLang();
  root.innerHTML = '';
  QUESTIONS.forEach((q, i) => {
    const item = q[lang];
    const card = document.createElement('div');
    card.className = 'card quiz-q';
    card.id = `quiz-${i}`;
    const h = document.createElement('h4');
    h.textContent = `Q${i + 1}. ${item.q}`;
    const tag = document.createElement('span');
    tag.className = 'tag';
    tag.textContent = q.multi ? t('quiz.multi') : t('quiz.single');
    h.append(' ', tag);
    card.append(h);
    if (!state.chosen[i]) state.chosen[i] = new Set();
    const chosen = state.chosen[i];
    item.o.forEach((opt, j) => {
      const label = document.createElement('label');
      label.className = 'opt';
      const input = document.createElement('input');
      input.type = q.multi ? 'checkbox' : 'radio';
      input.name = `q${i}`;
      input.value = j;
      input.checked = chosen.has(j);
      input.addEventListener('change', () => {
        if (!q.multi) chosen.clear();
        if (input.checked) chosen.add(j); else chosen.delete(j);
      });
      label.append(input, ` ${LETTERS[j]}. ${opt}`);
      card.append(label);
    });
    const btn = document.createElement('button');
    btn.textContent = t('quiz.check');
    const out = document.createElement('div');
    out.className = 'explain';
    const show = () => {
      const picked = [...(state.chosen[i] ?? [])].sort();
      const right = picked.length === q.answer.length && picked.every((v, k) => v === q.answer[k]);
      state.result[i] = right;
      const ans = q.answer.map((k) => LETTERS[k]).join('');
      out.innerHTML = '';
      const verdict = document.createElement('b');
      verdict.className = right ? 'ok' : 'bad';
      verdict.textContent = right ? t('quiz.right') : t('quiz.wrong', { ans });
      const p = document.createElement('p');
      p.textContent = item.e;
      out.append(verdict, p);
      updateScore(root, state);
    };
    btn.addEventListener('click', show);
    card.append(btn, out);
    if (i in state.result) show();
    root.append(card);
  });
  const score = document.createElement('p');
  score.id = 'quiz-score';
  root.append(score);
  updateScore(root, state);
}

function updateScore(root, state) {
  const el = root.querySelector('#quiz-score');
  if (!el) return;
  const s = Object.values(state.result).filter(Boolean).length;
  el.textContent = t('quiz.score', { s, n: QUESTIONS.length });
}
