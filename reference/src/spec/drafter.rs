//! Pluggable drafters for greedy speculative decoding (`spec/gemma4-assistant-mtp.md` §4.1
//! step 2): the real assistant ([`Assistant`], §2) and a [`ScriptedDrafter`] that proposes a
//! given continuation with corruptions at chosen steps (README-models §10 `scripted_drafter`),
//! so that acceptance, partial acceptance and rollback can be exercised exactly.

use super::assistant::{Assistant, DrafterKv};
use super::SpecError;
use crate::model::{Float, Model};

/// Everything a drafter may look at in one round (§4.1 state between rounds).
pub struct RoundContext<'a, F: Float> {
    /// The target model (its embedding table feeds the assistant, §2.1).
    pub target: &'a Model<F>,
    /// Committed tokens `t_0 … t_p` (prompt and emitted tokens); `t_p` is the newest.
    pub committed: &'a [u32],
    /// `p`: position of `t_p`, the position id of every draft step of the round (§2.4).
    pub p: usize,
    /// Carried hidden `h` `[H_T]`: the target's final-normed state of row `p−1` (§2.1).
    pub hidden: &'a [F],
    /// 1-based index of this verify round.
    pub round: usize,
    /// Target K/V rows visible to the drafter (§2.5, or transformers' set under emulation).
    pub kv: DrafterKv<'a, F>,
}

/// The drafts of one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// `d_1 … d_{K_r}` (exactly the requested count).
    pub tokens: Vec<u32>,
    /// Drafter forwards spent (`D` calls, §7; 0 for a scripted drafter).
    pub forwards: usize,
}

/// A source of draft tokens for [`super::SpecDecoder`].
pub trait Drafter<F: Float> {
    /// Proposes exactly `k ≥ 1` drafts for the round described by `ctx`.
    fn draft(&mut self, ctx: &RoundContext<'_, F>, k: usize) -> Result<Draft, SpecError>;
}

impl<F: Float> Drafter<F> for Assistant<F> {
    /// §4.1 step 2: `x = t_p`, `g = h`; `K_r` times `(ℓ, g) = D(x, g, p, KV)`, `d = argmax ℓ`,
    /// `x = d`. Checks the pairing with the target first.
    fn draft(&mut self, ctx: &RoundContext<'_, F>, k: usize) -> Result<Draft, SpecError> {
        (&*self).draft(ctx, k)
    }
}

impl<F: Float> Drafter<F> for &Assistant<F> {
    /// As for [`Assistant`] (a shared drafter serves several decoders).
    fn draft(&mut self, ctx: &RoundContext<'_, F>, k: usize) -> Result<Draft, SpecError> {
        self.check_target(ctx.target.config())?;
        let mut x = ctx.committed[ctx.p];
        let mut g = ctx.hidden.to_vec();
        let mut tokens = Vec::with_capacity(k);
        for _ in 0..k {
            let step = self.forward(ctx.target, &ctx.kv, x, &g, ctx.p)?;
            x = Assistant::draft_token(&step)?;
            tokens.push(x);
            g = step.hidden;
        }
        Ok(Draft {
            tokens,
            forwards: k,
        })
    }
}

/// Where a [`ScriptedDrafter`] is asked for one draft: round `round` (1-based), round position
/// `p`, draft index `i` (1-based) of `k` drafts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptStep {
    /// 1-based verify round.
    pub round: usize,
    /// Round position `p`.
    pub p: usize,
    /// 1-based draft index `i ≤ k`.
    pub i: usize,
    /// `K_r` of the round.
    pub k: usize,
}

/// Rule deciding a replacement draft (`Some(id)`) at a step, `None` = keep the script's token.
pub type CorruptionRule = Box<dyn Fn(ScriptStep) -> Option<u32> + Send + Sync>;

/// Drafts `d_i = sequence[p + i]` (0 past its end) unless the rule replaces it: with `sequence` =
/// prompt followed by the greedy continuation, every uncorrupted draft is accepted.
pub struct ScriptedDrafter {
    sequence: Vec<u32>,
    rule: CorruptionRule,
    /// Every step asked so far, with the token proposed (for tests).
    pub log: Vec<(ScriptStep, u32)>,
}

impl ScriptedDrafter {
    /// A drafter replaying `sequence` with `rule` applied at each step.
    pub fn new(
        sequence: Vec<u32>,
        rule: impl Fn(ScriptStep) -> Option<u32> + Send + Sync + 'static,
    ) -> ScriptedDrafter {
        ScriptedDrafter {
            sequence,
            rule: Box::new(rule),
            log: Vec::new(),
        }
    }

    /// The rule of README-models §10: in round `r` with `r % 3 == 0` and `K_r ≥ 2` the 2nd draft
    /// is `wrong` (the fixtures use id 7).
    pub fn every_third_round_second_draft(sequence: Vec<u32>, wrong: u32) -> ScriptedDrafter {
        Self::new(sequence, move |s| {
            (s.round % 3 == 0 && s.k >= 2 && s.i == 2).then_some(wrong)
        })
    }
}

impl<F: Float> Drafter<F> for ScriptedDrafter {
    fn draft(&mut self, ctx: &RoundContext<'_, F>, k: usize) -> Result<Draft, SpecError> {
        let tokens: Vec<u32> = (1..=k)
            .map(|i| {
                let step = ScriptStep {
                    round: ctx.round,
                    p: ctx.p,
                    i,
                    k,
                };
                let t = (self.rule)(step)
                    .unwrap_or_else(|| self.sequence.get(ctx.p + i).copied().unwrap_or(0));
                self.log.push((step, t));
                t
            })
            .collect();
        Ok(Draft {
            tokens,
            forwards: 0,
        })
    }
}
