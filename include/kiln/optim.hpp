// kiln/optim.hpp: optimizers (SGD, momentum, Adam, AdamW, clipping, schedules), the training
// step as one plan, and the trainer that runs it.
#pragma once

#include "optim/optimizers.hpp"
#include "optim/trainer.hpp"
