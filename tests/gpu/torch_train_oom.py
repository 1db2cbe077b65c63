"""A small training loop that grows its batch until it OOMs under a quota: the report's top holders
must name this file and line (and torch frames)."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=(2, 3)))


def train_step(model, opt, batch):
    x = torch.randn(batch, 3, 128, 128, device="cuda")  # BATCH-LINE
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


def main():
    torch.backends.cudnn.benchmark = False
    model = Net().cuda()
    opt = torch.optim.Adam(model.parameters())
    batch = 32
    try:
        while True:
            train_step(model, opt, batch)
            batch *= 2
    except torch.cuda.OutOfMemoryError:
        print(f"train: OutOfMemoryError at batch {batch}")


main()
